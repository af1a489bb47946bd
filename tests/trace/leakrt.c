/*
 * leakrt.c: libwmtleakrt.so, the "runtime" of tests/trace/leaky.c: one exported function the
 * program calls (through the PLT) when it has released its model, so that
 * `weightmap trace --cycles-marker wmt_rt_release` has a dynamic symbol to watch. The build
 * strips the library (strip --strip-all: no .symtab, as runtimes ship) and keeps an unstripped
 * copy, libwmtleakrt.unstripped.so, where nm finds rt_drop, the internal function the release
 * goes through: `--cycles-marker libwmtleakrt+0xOFFSET` marks it in the stripped object.
 */
__attribute__((visibility("default"))) int wmt_rt_release(int cycle);

static volatile int drops;

__attribute__((noinline)) static int rt_drop(int cycle) {
    drops++;
    return cycle + 1;
}

int wmt_rt_release(int cycle) { return rt_drop(cycle); }
