/*
 * oracle.c: where the llama.cpp oracle is (oracle.h).
 */
#include "oracle.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef WM_PEER_DEFAULT_DIR
#error "WM_PEER_DEFAULT_DIR: CMakeLists.txt defines it (where scripts/peer.sh installs the peer)"
#endif

const char *wm_oracle_dir(void) {
    const char *env = getenv("WM_PEER_DIR");
    return env && *env ? env : WM_PEER_DEFAULT_DIR;
}

const char *wm_oracle_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", wm_oracle_dir(), name);
    return buf;
}

bool wm_oracle_has(const char *name) {
    char p[4200];
    return access(wm_oracle_path(p, sizeof p, name), R_OK) == 0;
}
