/*
 * probe.c: the markers of libwmtrace.so: any function the process can name, hooked at its entry
 * and its return, however it is called (through a PLT, directly inside one object, from any
 * thread).
 *
 * A probe writes int3 over the first byte of the function. The SIGTRAP handler only points the
 * thread at wmtrace_probe_tramp (with the probe's index in r11, a scratch register no call
 * passes anything in); the trampoline saves the argument registers, calls probe_enter in normal
 * context (which records the entry and swaps the return address for wmtrace_probe_exit), restores
 * them and jumps to the probe's out-of-line copy of the displaced instruction (decoded by Zydis,
 * RIP-relative operands and relative jumps and calls rewritten), which jumps back to the second
 * instruction. On return, wmtrace_probe_exit records it and returns to the caller with the return
 * registers untouched. docs/TRACE.md says what this cannot see.
 *
 * Sections: specs; the probe table and arming; entry and return; the signal calls (a program's
 * own SIGTRAP handler is chained behind ours, and SIGTRAP is never blocked while probes are set).
 */
#include "interposer.h"

#include <Zydis/Zydis.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

wt_spec wt_specs[WMTRACE_MAX_SPECS];
int wt_n_specs;

/* ---- specs ---- */

/* "L SPEC" / "R SPEC" lines; SPEC: SYMBOL, OBJECT:SYMBOL or OBJECT+0xOFFSET. */
static void parse_specs(const char *s) {
    while (s && *s && wt_n_specs < WMTRACE_MAX_SPECS) {
        size_t n = strcspn(s, "\n");
        if (n > 2 && n < sizeof wt_stats->specs[0].text && (s[0] == 'L' || s[0] == 'R')) {
            wt_spec *sp = &wt_specs[wt_n_specs];
            wmtrace_spec *out = &wt_stats->specs[wt_n_specs];
            memset(sp, 0, sizeof *sp);
            sp->kind = s[0];
            memcpy(out->text, s + 2, n - 2);
            out->kind = (uint64_t)s[0];
            const char *text = out->text, *colon = strchr(text, ':'), *plus = strrchr(text, '+');
            if (plus && plus[1] == '0' && (plus[2] == 'x' || plus[2] == 'X')) {
                size_t on = (size_t)(plus - text);
                if (on < sizeof sp->object) memcpy(sp->object, text, on);
                for (const char *h = plus + 3; *h; h++) {
                    int d = *h >= '0' && *h <= '9'   ? *h - '0'
                            : *h >= 'a' && *h <= 'f' ? *h - 'a' + 10
                            : *h >= 'A' && *h <= 'F' ? *h - 'A' + 10
                                                     : -1;
                    if (d < 0) break;
                    sp->offset = sp->offset * 16 + (uint64_t)d;
                }
            } else if (colon) {
                size_t on = (size_t)(colon - text);
                if (on < sizeof sp->object) memcpy(sp->object, text, on);
                snprintf(sp->symbol, sizeof sp->symbol, "%s", colon + 1);
            } else {
                snprintf(sp->symbol, sizeof sp->symbol, "%s", text);
            }
            if (sp->kind == 'L') wt_have_load_markers = 1;
            wt_n_specs++;
        }
        s += n + (s[n] == '\n');
    }
    wt_stats->n_specs = (uint64_t)wt_n_specs;
}

/* ---- the probe table ---- */

#define PROBES 128
typedef struct probe {
    uintptr_t addr;
    unsigned char *ool; /* the displaced instruction, then a jump back (a page of its own) */
    int kind, spec, live;
} probe;
static probe probes[PROBES];
static int n_probes;
static volatile int probe_lock;
static int trap_installed;
static struct sigaction chained; /* the program's own SIGTRAP disposition */

void wmtrace_probe_tramp(void) HIDDEN;
void wmtrace_probe_exit(void) HIDDEN;

static int find_probe(uintptr_t at) {
    int n = __atomic_load_n(&n_probes, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (probes[i].addr == at && __atomic_load_n(&probes[i].live, __ATOMIC_ACQUIRE)) return i;
    return -1;
}

/* A page for the out-of-line copy within 2 GiB of addr (RIP-relative operands reach it). */
static unsigned char *near_page(uintptr_t addr) {
    for (int k = 1; k <= 96; k++) {
        long delta = (long)(k / 2) * (16l << 20) * (k % 2 ? 1 : -1);
        uintptr_t hint = ((addr & ~(uintptr_t)0xffff) + (uintptr_t)delta) & ~(uintptr_t)0xfff;
        void *p = wt_sys_mmap((void *)hint, 4096, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) continue;
        long d = (long)((uintptr_t)p - addr);
        if (d > -(1l << 31) + 8192 && d < (1l << 31) - 8192) return p;
        wt_sys_munmap(p, 4096);
    }
    return NULL;
}

static void put_abs_jmp(unsigned char *at, uintptr_t to) {
    static const unsigned char jmp[6] = {0xff, 0x25, 0, 0, 0, 0}; /* jmp *0(%rip) */
    memcpy(at, jmp, 6);
    memcpy(at + 6, &to, 8);
}

/* Writes the out-of-line copy of the instruction at addr into ool; its length in *len.
 * Returns NULL, or why it cannot be moved. */
static const char *relocate(uintptr_t addr, size_t avail, unsigned char *ool, size_t *len) {
    ZydisDecoder dec;
    ZydisDecodedInstruction in;
    ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&dec, NULL, (const void *)addr, avail, &in)))
        return "its first instruction does not decode";
    *len = in.length;
    uintptr_t next = addr + in.length;
    bool rel_imm = in.raw.imm[0].is_relative;
    if (rel_imm && in.meta.category == ZYDIS_CATEGORY_UNCOND_BR) {
        put_abs_jmp(ool, next + (uintptr_t)in.raw.imm[0].value.s);
        return NULL;
    }
    if (rel_imm && in.meta.category == ZYDIS_CATEGORY_CALL) {
        static const unsigned char call[8] = {0xff, 0x15, 2, 0, 0, 0, 0xeb, 8};
        uintptr_t to = next + (uintptr_t)in.raw.imm[0].value.s;
        memcpy(ool, call, 8); /* call *2(%rip); jmp over the target */
        memcpy(ool + 8, &to, 8);
        put_abs_jmp(ool + 16, next);
        return NULL;
    }
    if (rel_imm) return "its first instruction is a conditional branch";
    memcpy(ool, (const void *)addr, in.length);
    if ((in.attributes & ZYDIS_ATTRIB_IS_RELATIVE) && in.raw.disp.size == 32) {
        int32_t disp;
        memcpy(&disp, ool + in.raw.disp.offset, 4);
        int64_t moved = (int64_t)disp + (int64_t)(addr - (uintptr_t)ool);
        if (moved < INT32_MIN || moved > INT32_MAX) return "no room near it";
        disp = (int32_t)moved;
        memcpy(ool + in.raw.disp.offset, &disp, 4);
    }
    put_abs_jmp(ool + in.length, next);
    return NULL;
}

/* Writes one byte of text: through /proc/self/mem (no change to the mapping), else by making the
 * page writable for the store. */
static bool poke(uintptr_t addr, unsigned char byte) {
    int fd = (int)wt_sys_openat(AT_FDCWD, "/proc/self/mem", O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        long w = wt_sys_pwrite(fd, &byte, 1, (off_t)addr);
        wt_sys_close(fd);
        if (w == 1) return true;
    }
    uintptr_t page = addr & ~(uintptr_t)4095;
    if (wt_sys_mprotect((void *)page, 4096, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return false;
    *(volatile unsigned char *)addr = byte;
    wt_sys_mprotect((void *)page, 4096, PROT_READ | PROT_EXEC);
    return true;
}

static void arm_failed(uintptr_t addr, int spec, const char *why) {
    char msg[256];
    snprintf(msg, sizeof msg, "marker %s at 0x%lx not hooked: %s",
             spec >= 0 ? wt_stats->specs[spec].text : "(dynamic linker)", (unsigned long)addr, why);
    wt_warn(msg);
}

int wt_probe_arm(uintptr_t addr, int kind, int spec, uint64_t size) {
    if (find_probe(addr) >= 0) return -1;
    if (*(const unsigned char *)addr == 0xcc) {
        arm_failed(addr, spec, "it starts with int3 already (a debugger's breakpoint?)");
        return -1;
    }
    wt_spin_lock(&probe_lock);
    int i = n_probes;
    const char *why = i >= PROBES ? "too many marker sites" : NULL;
    unsigned char *ool = why ? NULL : near_page(addr);
    size_t len = 0;
    if (!why && !ool) why = "no memory for its out-of-line copy";
    if (!why) why = relocate(addr, size && size < 15 ? size : 15, ool, &len);
    if (why) {
        wt_spin_unlock(&probe_lock);
        if (ool) wt_sys_munmap(ool, 4096);
        arm_failed(addr, spec, why);
        return -1;
    }
    wt_sys_mprotect(ool, 4096, PROT_READ | PROT_EXEC);
    probes[i] = (probe){addr, ool, kind, spec, 1};
    __atomic_store_n(&n_probes, i + 1, __ATOMIC_RELEASE);
    wt_spin_unlock(&probe_lock);
    if (!poke(addr, 0xcc)) {
        __atomic_store_n(&probes[i].live, 0, __ATOMIC_RELEASE);
        arm_failed(addr, spec, "its text cannot be written");
        return -1;
    }
    return i;
}

size_t wt_tables_bytes_probe(void) {
    return sizeof probes + sizeof wt_specs +
           (size_t)__atomic_load_n(&n_probes, __ATOMIC_RELAXED) * 4096;
}

/* The object that held [lo, hi) is gone: its probes with it (its text is unmapped). */
void wt_probes_forget(uintptr_t lo, uintptr_t hi) {
    for (int i = 0; i < __atomic_load_n(&n_probes, __ATOMIC_ACQUIRE); i++)
        if (probes[i].addr >= lo && probes[i].addr < hi)
            __atomic_store_n(&probes[i].live, 0, __ATOMIC_RELEASE);
}

/* ---- entry and return ---- */

/* wmtrace_probe_tramp: entered from the SIGTRAP handler at a probed function's entry (the
 * arguments in their registers, the return address at 0(%rsp), the probe's index in r11). It
 * steps over the red zone, saves the argument registers (and rax: the vector count of a variadic
 * call; r10: the static chain), calls probe_enter(&return slot, index), restores them and jumps
 * where probe_enter said (the out-of-line copy). wmtrace_probe_exit: the hooked return lands
 * here; it keeps rax, rdx, xmm0 and xmm1 (the return registers) around probe_return(rsp), which
 * gives the caller's return address back. */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl wmtrace_probe_tramp\n"
        ".hidden wmtrace_probe_tramp\n"
        ".type wmtrace_probe_tramp,@function\n"
        "wmtrace_probe_tramp:\n"
        "  lea -128(%rsp), %rsp\n"
        "  push %rdi\n  push %rsi\n  push %rdx\n  push %rcx\n"
        "  push %r8\n  push %r9\n  push %rax\n  push %r10\n"
        "  sub $136, %rsp\n"
        "  movdqu %xmm0, 0(%rsp)\n  movdqu %xmm1, 16(%rsp)\n  movdqu %xmm2, 32(%rsp)\n"
        "  movdqu %xmm3, 48(%rsp)\n  movdqu %xmm4, 64(%rsp)\n  movdqu %xmm5, 80(%rsp)\n"
        "  movdqu %xmm6, 96(%rsp)\n  movdqu %xmm7, 112(%rsp)\n"
        "  lea 328(%rsp), %rdi\n"
        "  mov %r11, %rsi\n"
        "  call wmtrace_probe_enter\n"
        "  mov %rax, %r11\n"
        "  movdqu 0(%rsp), %xmm0\n  movdqu 16(%rsp), %xmm1\n  movdqu 32(%rsp), %xmm2\n"
        "  movdqu 48(%rsp), %xmm3\n  movdqu 64(%rsp), %xmm4\n  movdqu 80(%rsp), %xmm5\n"
        "  movdqu 96(%rsp), %xmm6\n  movdqu 112(%rsp), %xmm7\n"
        "  add $136, %rsp\n"
        "  pop %r10\n  pop %rax\n  pop %r9\n  pop %r8\n"
        "  pop %rcx\n  pop %rdx\n  pop %rsi\n  pop %rdi\n"
        "  lea 128(%rsp), %rsp\n"
        "  jmp *%r11\n"
        ".size wmtrace_probe_tramp, .-wmtrace_probe_tramp\n"
        ".p2align 4\n"
        ".globl wmtrace_probe_exit\n"
        ".hidden wmtrace_probe_exit\n"
        ".type wmtrace_probe_exit,@function\n"
        "wmtrace_probe_exit:\n"
        "  sub $8, %rsp\n  push %rax\n  push %rdx\n  sub $40, %rsp\n"
        "  movdqu %xmm0, 0(%rsp)\n  movdqu %xmm1, 16(%rsp)\n"
        "  lea 64(%rsp), %rdi\n"
        "  call wmtrace_probe_return\n"
        "  mov %rax, 56(%rsp)\n"
        "  movdqu 0(%rsp), %xmm0\n  movdqu 16(%rsp), %xmm1\n"
        "  add $40, %rsp\n  pop %rdx\n  pop %rax\n"
        "  ret\n"
        ".size wmtrace_probe_exit, .-wmtrace_probe_exit\n");

void *wmtrace_probe_enter(void **slot, long idx) HIDDEN;
void *wmtrace_probe_return(void **rsp) HIDDEN;

/* The release returned: count it, say which load it follows and what of it malloc still holds,
 * then the process's figures. */
static void released(const char *source) {
    __atomic_fetch_add(&wt_stats->markers, 1, __ATOMIC_RELAXED);
    int last = __atomic_load_n(&wt_last_load, __ATOMIC_ACQUIRE) - 1;
    wt_line l;
    wt_begin(&l, 'R');
    wt_put_s(&l, source);
    wt_put_i(&l, last);
    wt_put_u(&l, wt_load_kept(last));
    wt_end(&l);
    wt_point(true);
}

/* A release begins: without load markers it ends the load under way. */
static void release_begins(void) {
    if (!wt_have_load_markers) {
        int cur = __atomic_load_n(&wt_cur_load, __ATOMIC_ACQUIRE);
        if (cur) wt_load_end(cur - 1);
    }
}

void wt_release_now(const char *source) {
    if (!wt_active || !wt_stats) return;
    int saved = wt_tl.in_hook;
    wt_tl.in_hook = 1;
    release_begins();
    released(source);
    wt_tl.in_hook = saved;
}

void *wmtrace_probe_enter(void **slot, long idx) {
    probe *p = &probes[idx];
    if (p->kind == 'D') { /* the dynamic linker's hook: objects came or went */
        struct r_debug *r = (struct r_debug *)wt_r_debug_get();
        if (wt_active && r && r->r_state == RT_CONSISTENT) wt_rescan();
        return p->ool;
    }
    if (!wt_active || !wt_stats) return p->ool;
    int e = errno, saved = wt_tl.in_hook;
    wt_tl.in_hook = 1;
    __atomic_fetch_add(&wt_stats->specs[p->spec].hits, 1, __ATOMIC_RELAXED);
    int64_t arg = -1;
    if (p->kind == 'L') {
        arg = wt_load_begin(p->spec);
    } else {
        __atomic_fetch_add(&wt_releasing, 1, __ATOMIC_ACQ_REL);
        release_begins();
        wt_line l;
        wt_begin(&l, 'r');
        wt_put_u(&l, (uint64_t)p->spec);
        wt_end(&l);
    }
    int d = wt_tl.ret_depth;
    if (d < (int)(sizeof wt_tl.ret_stack / sizeof wt_tl.ret_stack[0])) {
        wt_tl.ret_stack[d].ret = *slot;
        wt_tl.ret_stack[d].slot = slot;
        wt_tl.ret_stack[d].probe = (int)idx;
        wt_tl.ret_stack[d].arg = arg;
        wt_tl.ret_depth = d + 1;
        *slot = (void *)wmtrace_probe_exit;
    } else {
        wt_warn("marker returns nested too deep on one thread: a return not seen");
        if (p->kind == 'R') __atomic_fetch_sub(&wt_releasing, 1, __ATOMIC_ACQ_REL);
    }
    wt_tl.in_hook = saved;
    errno = e;
    return p->ool;
}

/* rsp: the stack pointer after the function returned (its slot was just below). Frames left
 * without returning (longjmp, an exception caught above them) are dropped on the way. */
void *wmtrace_probe_return(void **rsp) {
    int e = errno, saved = wt_tl.in_hook;
    wt_tl.in_hook = 1;
    int d = wt_tl.ret_depth - 1;
    while (d > 0 && wt_tl.ret_stack[d].slot < rsp - 1)
        d--;
    wt_tl.ret_depth = d;
    void *ret = wt_tl.ret_stack[d].ret;
    const probe *p = &probes[wt_tl.ret_stack[d].probe];
    if (wt_active && wt_stats) {
        if (p->kind == 'L') {
            wt_load_end((int)wt_tl.ret_stack[d].arg);
        } else {
            released(wt_stats->specs[p->spec].text);
            __atomic_fetch_sub(&wt_releasing, 1, __ATOMIC_ACQ_REL);
        }
    }
    wt_tl.in_hook = saved;
    errno = e;
    return ret;
}

/* ---- SIGTRAP ---- */

static void on_trap(int sig, siginfo_t *si, void *ctx) {
    ucontext_t *uc = ctx;
    int i = find_probe((uintptr_t)uc->uc_mcontext.gregs[REG_RIP] - 1);
    if (i >= 0) {
        uc->uc_mcontext.gregs[REG_R11] = i;
        uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)wmtrace_probe_tramp;
        return;
    }
    /* Not ours: the program's own handler, or what the default would have done. */
    if (chained.sa_flags & SA_SIGINFO) {
        chained.sa_sigaction(sig, si, ctx);
    } else if (chained.sa_handler == SIG_DFL) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        wt_r_sigaction(SIGTRAP, &dfl, NULL);
        raise(SIGTRAP);
    } else if (chained.sa_handler != SIG_IGN) {
        chained.sa_handler(sig);
    }
}

void wt_probes_start(const char *specs) {
    parse_specs(specs);
    if (!wt_n_specs) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
    if (wt_r_sigaction(SIGTRAP, &sa, &chained) != 0) {
        wt_warn("markers: SIGTRAP cannot be handled; no marker is hooked");
        return;
    }
    trap_installed = 1;
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, SIGTRAP);
    wt_r_pthread_sigmask(SIG_UNBLOCK, &unblock, NULL);
    struct r_debug *r = (struct r_debug *)wt_r_debug_get();
    if (!r || !r->r_brk || wt_probe_arm(r->r_brk, 'D', -1, 0) < 0)
        wt_warn("markers: the dynamic linker's hook cannot be set; objects loaded later are "
                "not searched");
    wt_rescan();
}

#ifndef WMTRACE_SELFTEST
/* While probes are set, the program's SIGTRAP handler is kept to be chained, not installed, and
 * SIGTRAP is taken out of every mask it asks for (a thread that blocks it would be killed by the
 * kernel at its first probe). */
EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!wt_resolved) wt_resolve();
    if (sig != SIGTRAP || !trap_installed) return wt_r_sigaction(sig, act, old);
    if (old) *old = chained;
    if (act) chained = *act;
    return 0;
}
EXPORT sighandler_t signal(int sig, sighandler_t h) {
    if (!wt_resolved) wt_resolve();
    if (sig != SIGTRAP || !trap_installed) return (sighandler_t)wt_r_signal(sig, (void *)h);
    sighandler_t prev = (chained.sa_flags & SA_SIGINFO) ? SIG_DFL : chained.sa_handler;
    memset(&chained, 0, sizeof chained);
    chained.sa_handler = h;
    return prev;
}
static const sigset_t *keep_trap(int how, const sigset_t *set, sigset_t *copy) {
    if (!trap_installed || !set || how == SIG_UNBLOCK || !sigismember(set, SIGTRAP)) return set;
    *copy = *set;
    sigdelset(copy, SIGTRAP);
    return copy;
}
EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old) {
    if (!wt_resolved) wt_resolve();
    sigset_t copy;
    return wt_r_sigprocmask(how, keep_trap(how, set, &copy), old);
}
EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
    if (!wt_resolved) wt_resolve();
    sigset_t copy;
    return wt_r_pthread_sigmask(how, keep_trap(how, set, &copy), old);
}
#endif
