/*
 * abi.c: the probed program of the tracer's ABI test (tests/test_trace.c, trace.abi_*). Built by
 * gcc and by clang at -O0 to -O3, and with -fcf-protection (endbr64), so its functions have the
 * prologues those compilers emit: none at all, push, sub $imm,%rsp, endbr64, a leaf writing
 * below rsp (the red zone), a tail call as a jmp. Every function below is a marker in the test.
 * Between them they take every kind of x86-64 SysV argument (six integer and eight vector
 * registers, stack words of both classes, structs by value in registers and in memory, a long
 * double, whole vector registers (both halves), a 128-bit integer, floats packed two to a
 * register, a variadic call with al set) and return every kind of result (rax, rax:rdx,
 * xmm0:xmm1, a whole xmm0, st0, a struct through the hidden pointer). The callers are in the same
 * file, so gcc's -fipa-ra keeps their own values in call-clobbered registers that it knows the
 * callee leaves alone: a probe that changes any register changes what this program prints.
 *
 *     abi THREADS ROUNDS LIB   THREADS threads (and main) call every function ROUNDS times
 *                              while one more thread dlopens LIB (libwmtabi.so), calls its
 *                              abi_so_fn and dlcloses it, ROUNDS times; then one checksum line per
 *                              thread on stdout, the same traced or not
 *     abi --shapes             the shapes of its own functions' first bytes, as built (untraced)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noclone))
#if defined(__clang__)
#undef NOINLINE
#define NOINLINE __attribute__((noinline))
#endif

struct big {
    long a, b, c;
    double d;
}; /* MEMORY class: by value on the stack, returned through a hidden pointer */
struct mixed {
    long l;
    double d;
}; /* INTEGER + SSE: one of each register */
struct two {
    long a, b;
}; /* rax:rdx */
struct pair {
    double x, y;
}; /* xmm0:xmm1 */

struct f3 {
    float a, b, c;
}; /* SSE: a and b packed in one register, c in the next */
typedef double v2d __attribute__((vector_size(16))); /* a whole xmm register */

int abi_global = 7;

NOINLINE double abi_regs(long a, long b, long c, long d, long e, long f, double x0, double x1,
                         double x2, double x3, double x4, double x5, double x6, double x7) {
    return (double)(a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f) + x0 * 1.5 + x1 * 2.5 + x2 * 3.5 +
           x3 * 4.5 + x4 * 5.5 + x5 * 6.5 + x6 * 7.5 + x7 * 8.5;
}

NOINLINE struct big abi_stack(long a, long b, long c, long d, long e, long f, double x0, double x1,
                              double x2, double x3, double x4, double x5, double x6, double x7,
                              long s1, double s2, struct big bg, float s3, struct mixed m) {
    struct big r;
    r.a = a ^ b ^ c ^ d ^ e ^ f ^ s1 ^ bg.a ^ m.l;
    r.b = bg.b * 3 + bg.c;
    r.c = (long)(s3 * 4.0f) + (long)s2;
    r.d = x0 + x1 * x2 - x3 + x4 * x5 - x6 + x7 + bg.d * m.d;
    return r;
}

NOINLINE struct two abi_small(struct mixed m, struct two t, int k) {
    struct two r = {t.a * k + m.l, t.b - (long)(m.d * k)};
    return r;
}

NOINLINE struct pair abi_pair(double a, double b, float c) {
    struct pair r = {a * c + b, b * c - a};
    return r;
}

NOINLINE long double abi_ld(long double x, int k) { return x * k + 0.25L; }

/* Eight whole vector registers (both halves of each xmm), a ninth vector on the stack, a
 * 128-bit integer in a register pair, three floats packed two to a register; returns a whole
 * xmm0. */
NOINLINE v2d abi_vec(v2d a, v2d b, v2d c, v2d d, v2d e, v2d f, v2d g, v2d h, v2d on_stack,
                     __int128 wide, struct f3 t) {
    v2d r = a * 1.5 + b - c * 0.25 + d * e - f + g * h + on_stack;
    r[0] += (double)(long)(wide >> 64) + t.a + t.c;
    r[1] += (double)(long)wide + t.b;
    return r;
}

NOINLINE double abi_var(int n, ...) {
    va_list ap;
    va_start(ap, n);
    double s = 0;
    for (int i = 0; i < n; i++) {
        if (i & 1)
            s += va_arg(ap, double) * (i + 1);
        else
            s += (double)(va_arg(ap, long) * 3);
    }
    va_end(ap);
    return s;
}

/* A leaf whose locals live below rsp (the red zone) at -O1 and up. */
NOINLINE long abi_rz(const long *v, int n) {
    volatile long t[10];
    for (int i = 0; i < 10; i++)
        t[i] = v[i % n] * (i + 1);
    long s = 0;
    for (int i = 0; i < 10; i++)
        s += t[(i * 7) % 10] ^ i;
    return s;
}

NOINLINE long abi_tail_to(long x, long y) { return x * 31 + y; }
/* A tail call: a jmp to abi_tail_to at -O2 (both are markers: two returns through one slot). */
NOINLINE long abi_tail(long x) { return abi_tail_to(x * 3, x); }

/* Its first instruction reads abi_global relative to rip at -O1 and up. */
NOINLINE int abi_rip(int k) { return abi_global * k; }

NOINLINE void abi_empty(void) { __asm__ volatile(""); }

/* A first instruction no probe can move (a relative conditional branch, as no compiler emits at
 * an entry): the marker on it must be refused by name and the function left as it is. Its
 * branch goes to the next instruction either way. */
long abi_jrcxz(long x);
__asm__(".text\n.globl abi_jrcxz\n.type abi_jrcxz,@function\nabi_jrcxz:\n"
        "  jrcxz 1f\n1:\n  lea 1(%rdi,%rdi), %rax\n  ret\n.size abi_jrcxz, .-abi_jrcxz\n");

/* ---- the run ---- */

static uint64_t mix(uint64_t h, const void *v, size_t n) {
    const unsigned char *b = v;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define MIX(h, v) ((h) = mix((h), &(v), sizeof(v)))

static int rounds;

static uint64_t one_round(long t, int r) {
    uint64_t h = 0xcbf29ce484222325ull;
    long k = t * 1000 + r;
    double d = abi_regs(k, 2, 3, 4, 5, 6, .1, .2, .3, .4, .5, .6, .7, (double)r);
    MIX(h, d);
    struct big bg = {k, 2, 3, 4.25}, rb;
    struct mixed m = {k * 5, 0.5 + r};
    rb = abi_stack(1, 2, 3, 4, 5, k, .1, .2, .3, .4, .5, .6, .7, .8, 11, 12.5, bg, 1.5f, m);
    MIX(h, rb.a);
    MIX(h, rb.b);
    MIX(h, rb.c);
    MIX(h, rb.d);
    struct two tw = abi_small(m, (struct two){k, -k}, r + 1);
    MIX(h, tw.a);
    MIX(h, tw.b);
    struct pair p = abi_pair((double)k, 0.125, 3.0f);
    MIX(h, p.x);
    MIX(h, p.y);
    long double ld = abi_ld((long double)k / 3, r);
    double ldd = (double)ld;
    MIX(h, ldd);
    v2d va = {k, 0.5}, vb = {1.25, -k}, vc = {r, 3}, vd = {7, 0.125};
    __int128 wide = ((__int128)k << 64) | (unsigned long)(r + 9);
    v2d vr = abi_vec(va, vb, vc, vd, va + vb, vb * vc, vc - vd, vd + va, va * vd, wide,
                     (struct f3){0.5f, (float)r, -1.5f});
    MIX(h, vr);
    d = abi_var(10, 1L, 2.0, k, 4.0, 5L, 6.0, 7L, 8.0, 9L, (double)r);
    MIX(h, d);
    long v[3] = {k, r, 3};
    long l = abi_rz(v, 3);
    MIX(h, l);
    l = abi_tail(k);
    MIX(h, l);
    int g = abi_rip(r);
    MIX(h, g);
    abi_empty();
    l = abi_jrcxz(k);
    MIX(h, l);
    return h;
}

static void *worker(void *arg) {
    long t = (long)arg;
    uint64_t h = 0;
    for (int r = 0; r < rounds; r++)
        h ^= one_round(t, r) + (uint64_t)r;
    return (void *)(uintptr_t)h;
}

static const char *lib;

static void *loader(void *arg) {
    (void)arg;
    uint64_t h = 0;
    for (int r = 0; r < rounds; r++) {
        void *so = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!so) {
            fprintf(stderr, "abi: %s\n", dlerror());
            exit(3);
        }
        double (*fn)(long, double, struct mixed) =
            (double (*)(long, double, struct mixed))dlsym(so, "abi_so_fn");
        if (!fn) exit(3);
        double d = fn(r, 0.5, (struct mixed){r * 7, 1.25});
        MIX(h, d);
        dlclose(so);
    }
    return (void *)(uintptr_t)h;
}

/* ---- shapes ---- */

/* Each function's bytes, as far as its symbol's size (the program is linked with -rdynamic, so
 * dladdr1 finds its functions' symbols). */
static void shapes(const char *name, const void *fn) {
    const unsigned char *b = fn;
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (!dladdr1(fn, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym || !sym->st_size) {
        printf("%s: no symbol size\n", name);
        return;
    }
    int n = (int)sym->st_size, p = 0;
    char out[256] = "";
    if (b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa) {
        strcat(out, " endbr64");
        p = 4;
    }
    if ((b[p] >= 0x50 && b[p] <= 0x57) || (b[p] == 0x41 && b[p + 1] >= 0x50 && b[p + 1] <= 0x57))
        strcat(out, " push");
    if (b[p] == 0x48 && (b[p + 1] == 0x83 || b[p + 1] == 0x81) && b[p + 2] == 0xec)
        strcat(out, " sub_rsp");
    for (int i = 1; i + 2 < n; i++) /* a store to disp8(%rsp) with a negative disp8 */
        if ((b[i - 1] == 0x89 || b[i - 1] == 0x29 || b[i - 1] == 0x11) && (b[i] & 0xc7) == 0x44 &&
            b[i + 1] == 0x24 && b[i + 2] >= 0x80) {
            strcat(out, " redzone");
            break;
        }
    const unsigned char *to = (const unsigned char *)(uintptr_t)abi_tail_to;
    for (int i = 0; i + 2 <= n; i++) { /* jmp rel32 or rel8 to abi_tail_to */
        int32_t rel = 0;
        if (i + 5 <= n) memcpy(&rel, b + i + 1, 4);
        if ((b[i] == 0xe9 && i + 5 <= n && b + i + 5 + rel == to) ||
            (b[i] == 0xeb && b + i + 2 + (signed char)b[i + 1] == to)) {
            strcat(out, " tailjmp");
            break;
        }
    }
    printf("%s:%s first bytes %02x %02x %02x %02x\n", name, out, b[0], b[1], b[2], b[3]);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--shapes")) {
#define SHAPE(f) shapes(#f, (const void *)(uintptr_t)f)
        SHAPE(abi_regs);
        SHAPE(abi_stack);
        SHAPE(abi_small);
        SHAPE(abi_pair);
        SHAPE(abi_ld);
        SHAPE(abi_vec);
        SHAPE(abi_var);
        SHAPE(abi_rz);
        SHAPE(abi_tail);
        SHAPE(abi_tail_to);
        SHAPE(abi_rip);
        SHAPE(abi_empty);
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: abi THREADS ROUNDS LIB | abi --shapes\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    rounds = atoi(argv[2]);
    lib = argv[3];
    if (threads < 0 || threads > 16 || rounds < 1) return 2;
    pthread_t th[17];
    for (long t = 0; t < threads; t++)
        if (pthread_create(&th[t], NULL, worker, (void *)(t + 1)) != 0) return 3;
    if (pthread_create(&th[threads], NULL, loader, NULL) != 0) return 3;
    uint64_t h0 = (uint64_t)(uintptr_t)worker((void *)0);
    printf("main %016llx\n", (unsigned long long)h0);
    for (int t = 0; t <= threads; t++) {
        void *h;
        pthread_join(th[t], &h);
        printf("%s %d %016llx\n", t < threads ? "thread" : "loader", t,
               (unsigned long long)(uintptr_t)h);
    }
    return 0;
}
