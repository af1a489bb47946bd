/*
 * oracle.h: where the llama.cpp oracle is: the folder of llama.cpp's prebuilt libraries
 * (libggml-base.so, libllama...), which scripts/peer.sh installs (the npm package
 * @node-llama-cpp/linux-x64 in the npm cache outside the clone, linked into bench/peers/). One path
 * and one environment variable for the tests, the benchmarks and tools/gen: $WM_PEER_DIR when set,
 * else WM_PEER_DEFAULT_DIR, which CMakeLists.txt defines once (bench/peers/..., the link peer.sh
 * makes).
 */
#ifndef WM_ORACLE_H
#define WM_ORACLE_H

#include <stdbool.h>
#include <stddef.h>

/* The oracle's library folder. */
const char *wm_oracle_dir(void);
/* buf = the oracle's library `name` ("libggml-base.so") in that folder; returns buf. */
const char *wm_oracle_path(char *buf, size_t cap, const char *name);
/* The library `name` is there and readable. */
bool wm_oracle_has(const char *name);

#endif
