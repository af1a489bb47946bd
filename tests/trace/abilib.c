/*
 * abilib.c: libwmtabi.so, the object tests/trace/abi dlopens and dlcloses over and over while
 * the tracer's markers are armed; its abi_so_fn is one of them (hooked at each dlopen, forgotten
 * at each dlclose), called with integer, vector and struct arguments.
 */
struct mixed {
    long l;
    double d;
};

double abi_so_fn(long r, double x, struct mixed m);
double abi_so_fn(long r, double x, struct mixed m) { return (double)r * x + (double)m.l * m.d; }
