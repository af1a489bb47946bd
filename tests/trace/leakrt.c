/*
 * leakrt.c: libwmtleakrt.so, the "runtime" of tests/trace/leaky.c: one exported function the
 * program calls (through the PLT) when it has released its model, so that
 * `weightmap trace --cycles-marker wmt_rt_release` has a dynamic symbol to watch.
 */
__attribute__((visibility("default"))) int wmt_rt_release(int cycle);

int wmt_rt_release(int cycle) { return cycle + 1; }
