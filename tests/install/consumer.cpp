// The public header compiles as C++ and links from C++.
#include <weightmap.h>
int main() { return wm_status_name(WM_OK)[0] == 'W' ? 0 : 1; }
