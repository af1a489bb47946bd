/*
 * probe.c: the markers of libwmtrace.so: any function the process can name, hooked at its entry
 * and its return, however it is called (through a PLT, directly inside one object, from any
 * thread).
 *
 * A probe writes int3 over the first byte of the function. The SIGTRAP handler changes nothing
 * but the thread's rip: it points it at the probe's entry stub (in the probe's page, beside the
 * out-of-line copy of the displaced instruction), which skips the red zone, pushes the probe's
 * index and jumps to wmtrace_probe_tramp. The trampoline saves every register (flags, general
 * registers, XSAVE state), calls probe_enter in normal context (which records the entry and swaps
 * the return address for wmtrace_probe_exit), restores everything and jumps to the copy (decoded
 * by Zydis, RIP-relative operands and relative jumps and calls rewritten), which jumps back to
 * the second instruction. On return, wmtrace_probe_exit saves and restores the same way around
 * probe_return and jumps to the caller. An instruction that cannot be moved is refused by name
 * and the function left alone. docs/TRACE.md says what this cannot see.
 *
 * Sections: specs; the probe table and arming; entry and return; the signal calls (a program's
 * own SIGTRAP handler is chained behind ours, and SIGTRAP is never blocked while probes are set).
 */
#include "interposer.h"

#include <Zydis/Zydis.h>
#include <cpuid.h>
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

/* Where the handle is, from a spec's end: "=ret", "=argN", "=*argN" (N 1-6); 0 none. The suffix
 * is cut from text. */
static uint64_t handle_of(char *text) {
    char *eq = strrchr(text, '=');
    if (!eq) return 0;
    uint64_t h = 0;
    if (!strcmp(eq, "=ret"))
        h = 1;
    else if (!strncmp(eq, "=arg", 4) && eq[4] >= '1' && eq[4] <= '6' && !eq[5])
        h = 10 + (uint64_t)(eq[4] - '0');
    else if (!strncmp(eq, "=*arg", 5) && eq[5] >= '1' && eq[5] <= '6' && !eq[6])
        h = 20 + (uint64_t)(eq[5] - '0');
    *eq = 0;
    return h;
}

/* SYMBOL, OBJECT:SYMBOL or OBJECT+0xOFFSET into sp. */
static void spec_place(wt_spec *sp, const char *text) {
    const char *colon = strchr(text, ':'), *plus = strrchr(text, '+');
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
}

/* ONNX Runtime's C API is a table of function pointers (OrtApi, version 1's part frozen by a
 * static_assert in onnxruntime_c_api.cc): CreateSession is its entry 7, CreateSessionFromArray
 * 8, ReleaseSession 95. Its library is stripped to OrtGetApiBase, so "t OrtGetApiBase RUNTIME"
 * marks that function, and at its first return the table's three entries are hooked. */
static const struct {
    int kind, index, handle;
    const char *text;
} ort_api[] = {
    {'L', 7, 24, "OrtApi::CreateSession=*arg4"},
    {'L', 8, 25, "OrtApi::CreateSessionFromArray=*arg5"},
    {'R', 95, 11, "OrtApi::ReleaseSession=arg1"},
};

static void ort_specs(const char *runtime) {
    for (size_t i = 0; i < sizeof ort_api / sizeof *ort_api && wt_n_specs < WMTRACE_MAX_SPECS;
         i++) {
        wt_spec *sp = &wt_specs[wt_n_specs];
        wmtrace_spec *out = &wt_stats->specs[wt_n_specs++];
        memset(sp, 0, sizeof *sp);
        sp->kind = ort_api[i].kind;
        sp->known = 1;
        sp->handle = ort_api[i].handle;
        sp->table = ort_api[i].index + 1;
        out->kind = (uint64_t)sp->kind;
        out->known = 1;
        out->handle = (uint64_t)sp->handle;
        snprintf(out->text, sizeof out->text, "%s", ort_api[i].text);
        snprintf(out->runtime, sizeof out->runtime, "%s", runtime);
    }
}

/* OrtGetApiBase returned base (an OrtApiBase: GetApi, GetVersionString): the table's entries are
 * hooked, once. GetApi(1) returns the whole table for any version the library has, with no
 * message. */
static void ort_table(uint64_t base) {
    static int done;
    if (!base || __atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL)) return;
    const void *(*get_api)(uint32_t);
    memcpy(&get_api, (const void *)(uintptr_t)base, sizeof get_api);
    const void *const *api = get_api ? get_api(1) : NULL;
    if (!api) return;
    const char *object = "";
    for (int k = 0; k < wt_n_specs; k++)
        if (wt_specs[k].kind == 'T') object = wt_stats->specs[k].object;
    for (int k = 0; k < wt_n_specs; k++) {
        if (!wt_specs[k].table) continue;
        uintptr_t at = (uintptr_t)api[wt_specs[k].table - 1];
        if (!at || wt_probe_arm(at, wt_specs[k].kind, k, 0) < 0) continue;
        wmtrace_spec *out = &wt_stats->specs[k];
        if (!out->sites++) snprintf(out->object, sizeof out->object, "%s", object);
        __atomic_fetch_add(&wt_known_sites, 1, __ATOMIC_RELEASE);
    }
}

/* "L SPEC" / "R SPEC" lines (the user's), "l SPEC RUNTIME" / "r SPEC RUNTIME" (a known runtime's;
 * RUNTIME ggml: a fallback); SPEC: SYMBOL, OBJECT:SYMBOL or OBJECT+0xOFFSET, then =ret, =argN or
 * =*argN where it says where the handle is. The tracer checked them. */
static void parse_specs(const char *s) {
    while (s && *s && wt_n_specs < WMTRACE_MAX_SPECS) {
        size_t n = strcspn(s, "\n");
        char k = s[0];
        bool known = k == 'l' || k == 'r' || k == 't';
        if (n > 2 && n < sizeof wt_stats->specs[0].text && (k == 'L' || k == 'R' || known)) {
            wt_spec *sp = &wt_specs[wt_n_specs];
            wmtrace_spec *out = &wt_stats->specs[wt_n_specs];
            memset(sp, 0, sizeof *sp);
            sp->kind = known ? k - 'a' + 'A' : k; /* t: T, a table's function */
            memcpy(out->text, s + 2, n - 2);
            out->kind = (uint64_t)sp->kind;
            char *rt = strchr(out->text, ' ');
            if (rt) {
                *rt++ = 0;
                snprintf(out->runtime, sizeof out->runtime, "%s", rt);
                memset(rt, 0, strlen(rt));
            }
            out->known = !known ? 0 : !strcmp(out->runtime, "ggml") ? 2 : 1;
            sp->known = (int)out->known;
            char place[sizeof out->text];
            snprintf(place, sizeof place, "%s", out->text);
            out->handle = handle_of(place);
            sp->handle = (int)out->handle;
            spec_place(sp, place);
            if (sp->kind == 'L' && !known) wt_have_load_markers = 1;
            wt_n_specs++;
            if (sp->kind == 'T') ort_specs(out->runtime);
        }
        s += n + (s[n] == '\n');
    }
    wt_stats->n_specs = (uint64_t)wt_n_specs;
}

/* ---- the probe table ---- */

/* A probe's page (within 2 GiB of the function, so RIP-relative operands reach): the displaced
 * instruction and a jump back at 0, the entry stub at ENTRY_STUB (skip the red zone, push the
 * probe's index, jump to wmtrace_probe_tramp: the SIGTRAP handler changes nothing but rip). */
#define PROBES 128
#define ENTRY_STUB 64
typedef struct probe {
    uintptr_t addr;
    unsigned char *ool;
    int kind, spec, live;
} probe;
static probe probes[PROBES];
static int n_probes;
static volatile int probe_lock;
static int trap_installed;
static struct sigaction chained; /* the program's own SIGTRAP disposition */

/* What the stubs save: every register the function or its caller can hold a value in. XSAVE of
 * x87, SSE, AVX and AVX-512 state (and opmasks) where the OS enabled it, else FXSAVE. */
unsigned wmtrace_xsave_size HIDDEN; /* bytes (a multiple of 64); 0: FXSAVE's 512 */
uint64_t wmtrace_xsave_mask HIDDEN;

void wmtrace_probe_tramp(void) HIDDEN;
void wmtrace_probe_exit(void) HIDDEN;

static int find_probe(uintptr_t at) {
    int n = __atomic_load_n(&n_probes, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (__atomic_load_n(&probes[i].live, __ATOMIC_ACQUIRE) &&
            __atomic_load_n(&probes[i].addr, __ATOMIC_RELAXED) == at)
            return i;
    return -1;
}

static void xsave_setup(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return;
    __cpuid_count(0xd, 0, a, b, c, d);
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    /* x87, SSE, AVX, AVX-512 opmasks and upper halves; not PKRU (restoring it is the program's
     * business) nor AMX tiles (a restore of them traps for a process that never asked). */
    wmtrace_xsave_mask = ((uint64_t)hi << 32 | lo) & 0xe7;
    wmtrace_xsave_size = (b + 63) & ~63u;
}

/* A page for the out-of-line copy within 2 GiB of addr (RIP-relative operands reach it). */
static bool near(const void *page, uintptr_t addr) {
    long d = (long)((uintptr_t)page - addr);
    return d > -(1l << 31) + 8192 && d < (1l << 31) - 8192;
}
static unsigned char *near_page(uintptr_t addr) {
    for (int k = 1; k <= 96; k++) {
        long delta = (long)(k / 2) * (16l << 20) * (k % 2 ? 1 : -1);
        uintptr_t hint = ((addr & ~(uintptr_t)0xffff) + (uintptr_t)delta) & ~(uintptr_t)0xfff;
        void *p = wt_sys_mmap((void *)hint, 4096, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) continue;
        if (near(p, addr)) return p;
        wt_sys_munmap(p, 4096);
    }
    return NULL;
}

static void put_abs_jmp(unsigned char *at, uintptr_t to) {
    static const unsigned char jmp[6] = {0xff, 0x25, 0, 0, 0, 0}; /* jmp *0(%rip) */
    memcpy(at, jmp, 6);
    memcpy(at + 6, &to, 8);
}

/* lea -128(%rsp),%rsp; push $idx; jmp *0(%rip) to the trampoline. */
static void put_entry_stub(unsigned char *at, int idx) {
    static const unsigned char lea[5] = {0x48, 0x8d, 0x64, 0x24, 0x80};
    int32_t i = idx;
    memcpy(at, lea, 5);
    at[5] = 0x68;
    memcpy(at + 6, &i, 4);
    put_abs_jmp(at + 10, (uintptr_t)wmtrace_probe_tramp);
}

/* Writes the out-of-line copy of the instruction at addr into ool; its length in *len.
 * Returns NULL, or why it cannot be moved (the probe is then refused and the function left as
 * it is). avail: the bytes of the function known to be there (its symbol's size, else 15). */
static const char *relocate(uintptr_t addr, size_t avail, unsigned char *ool, size_t *len) {
    static char why[96];
    ZydisDecoder dec;
    ZydisDecodedInstruction in;
    ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&dec, NULL, (const void *)addr, avail, &in)))
        return "its first instruction does not decode (or runs past the function's end)";
    const char *name = ZydisMnemonicGetString(in.mnemonic);
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
    if (rel_imm) {
        snprintf(why, sizeof why, "its first instruction (%s) is a relative branch", name);
        return why;
    }
    switch (in.meta.category) {
    case ZYDIS_CATEGORY_SYSCALL:
    case ZYDIS_CATEGORY_SYSRET:
    case ZYDIS_CATEGORY_SYSTEM:
    case ZYDIS_CATEGORY_INTERRUPT:
    case ZYDIS_CATEGORY_RET:
        if (in.meta.category == ZYDIS_CATEGORY_RET && in.mnemonic == ZYDIS_MNEMONIC_RET) break;
        snprintf(why, sizeof why, "its first instruction (%s) is not one of a prologue", name);
        return why;
    default: break;
    }
    bool rip_rel = in.attributes & ZYDIS_ATTRIB_IS_RELATIVE;
    if (rip_rel && in.raw.disp.size != 32) {
        snprintf(why, sizeof why, "its first instruction (%s) is relative to rip without a disp32",
                 name);
        return why;
    }
    memcpy(ool, (const void *)addr, in.length);
    if (rip_rel) {
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

/* A free slot (a probe of an object that was unloaded, else a new one) and its page, near addr.
 * Called with probe_lock held; *why says what failed. */
static int take_slot(uintptr_t addr, const char **why) {
    int i = 0, n = n_probes;
    while (i < n && __atomic_load_n(&probes[i].live, __ATOMIC_ACQUIRE))
        i++;
    if (i == n && n >= PROBES) {
        *why = "too many marker sites";
        return -1;
    }
    if (i < n && !near(probes[i].ool, addr)) {
        wt_sys_munmap(probes[i].ool, 4096);
        probes[i].ool = NULL;
    }
    if (i == n || !probes[i].ool)
        probes[i].ool = near_page(addr);
    else
        wt_sys_mprotect(probes[i].ool, 4096, PROT_READ | PROT_WRITE);
    if (!probes[i].ool) {
        *why = "no memory for its out-of-line copy";
        return -1;
    }
    if (i == n) __atomic_store_n(&n_probes, n + 1, __ATOMIC_RELEASE);
    return i;
}

int wt_probe_arm(uintptr_t addr, int kind, int spec, uint64_t size) {
    if (find_probe(addr) >= 0) return -1;
    if (*(const unsigned char *)addr == 0xcc) {
        arm_failed(addr, spec, "it starts with int3 already (a debugger's breakpoint?)");
        return -1;
    }
    wt_spin_lock(&probe_lock);
    const char *why = NULL;
    int i = take_slot(addr, &why);
    size_t len = 0;
    if (i >= 0) {
        memset(probes[i].ool, 0xcc, 4096);
        why = relocate(addr, size && size < 15 ? size : 15, probes[i].ool, &len);
        put_entry_stub(probes[i].ool + ENTRY_STUB, i);
        wt_sys_mprotect(probes[i].ool, 4096, PROT_READ | PROT_EXEC);
    }
    if (why) {
        wt_spin_unlock(&probe_lock);
        arm_failed(addr, spec, why);
        return -1;
    }
    probes[i].kind = kind;
    probes[i].spec = spec;
    __atomic_store_n(&probes[i].addr, addr, __ATOMIC_RELAXED);
    __atomic_store_n(&probes[i].live, 1, __ATOMIC_RELEASE);
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

/* The object that held [lo, hi) is gone: its probes with it (its text is unmapped); their slots
 * and pages serve the next probes armed. */
void wt_probes_forget(uintptr_t lo, uintptr_t hi) {
    wt_spin_lock(&probe_lock);
    for (int i = 0; i < n_probes; i++)
        if (probes[i].addr >= lo && probes[i].addr < hi)
            __atomic_store_n(&probes[i].live, 0, __ATOMIC_RELEASE);
    wt_spin_unlock(&probe_lock);
}

/* ---- entry and return ---- */

/* The stubs run between a function's caller and the function, so they change no register at
 * all: a compiler that sees both (gcc's -fipa-ra) keeps the caller's values in call-clobbered
 * registers the callee does not touch (r10, r11, xmm8-15, ...), so "the ABI's argument registers"
 * is not enough. WT_SAVE pushes the flags and every general register, then XSAVEs (else FXSAVEs)
 * the vector and x87 state on the stack, 64-byte aligned; rbp keeps the pushed block (96 bytes).
 *
 * wmtrace_probe_tramp: reached from a probe's entry stub, the red zone skipped and the probe's
 * index pushed, so the function's entry rsp E is 136 bytes above. It calls probe_enter(E (the
 * return slot), index), puts what it returns (the out-of-line copy) at E-8, in the red zone
 * below E (which no signal frame touches), restores everything, sets rsp back to E and jumps
 * through E-8. wmtrace_probe_exit: the hooked return lands here with rsp R; it skips the red zone
 * the same way, calls probe_return(R) and jumps to the caller's return address through R-8.
 * Their unwind tables (.cfi) let a debugger walk from a hook through the trampoline to the
 * function's caller; the exit stub's says the caller is unknown there (it is in wt_tl), so a
 * backtrace stops at it instead of reading a stack word as a return address. */
__asm__(".macro WT_SAVE\n"
        "  pushfq\n  .cfi_adjust_cfa_offset 8\n"
        "  .irp r, rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11, rbx, rbp\n"
        "  push %\\r\n  .cfi_adjust_cfa_offset 8\n"
        "  .endr\n"
        "  mov %rsp, %rbp\n  .cfi_def_cfa_register %rbp\n"
        "  mov wmtrace_xsave_size(%rip), %eax\n"
        "  test %eax, %eax\n"
        "  jz 1f\n"
        "  sub %rax, %rsp\n"
        "  and $-64, %rsp\n"
        "  xor %eax, %eax\n"
        "  mov %rax, 512(%rsp)\n  mov %rax, 520(%rsp)\n  mov %rax, 528(%rsp)\n"
        "  mov %rax, 536(%rsp)\n  mov %rax, 544(%rsp)\n  mov %rax, 552(%rsp)\n"
        "  mov %rax, 560(%rsp)\n  mov %rax, 568(%rsp)\n"
        "  mov wmtrace_xsave_mask(%rip), %eax\n"
        "  mov wmtrace_xsave_mask+4(%rip), %edx\n"
        "  xsave64 (%rsp)\n"
        "  jmp 2f\n"
        "1:\n"
        "  sub $512, %rsp\n"
        "  and $-64, %rsp\n"
        "  fxsave64 (%rsp)\n"
        "2:\n"
        ".endm\n"
        ".macro WT_RESTORE\n"
        "  mov wmtrace_xsave_size(%rip), %eax\n"
        "  test %eax, %eax\n"
        "  jz 1f\n"
        "  mov wmtrace_xsave_mask(%rip), %eax\n"
        "  mov wmtrace_xsave_mask+4(%rip), %edx\n"
        "  xrstor64 (%rsp)\n"
        "  jmp 2f\n"
        "1:\n"
        "  fxrstor64 (%rsp)\n"
        "2:\n"
        "  mov %rbp, %rsp\n  .cfi_def_cfa_register %rsp\n"
        "  .irp r, rbp, rbx, r11, r10, r9, r8, rdi, rsi, rdx, rcx, rax\n"
        "  pop %\\r\n  .cfi_adjust_cfa_offset -8\n"
        "  .endr\n"
        "  popfq\n  .cfi_adjust_cfa_offset -8\n"
        ".endm\n"
        ".text\n"
        ".p2align 4\n"
        ".globl wmtrace_probe_tramp\n"
        ".hidden wmtrace_probe_tramp\n"
        ".type wmtrace_probe_tramp,@function\n"
        "wmtrace_probe_tramp:\n"
        "  .cfi_startproc\n"
        "  .cfi_def_cfa %rsp, 144\n" /* the caller's rsp: E + 8; the return address at E */
        "  .cfi_offset %rip, -8\n"
        "  WT_SAVE\n"
        "  lea 232(%rbp), %rdi\n"
        "  mov 96(%rbp), %rsi\n"
        "  mov %rbp, %rdx\n"
        "  call wmtrace_probe_enter\n"
        "  mov %rax, 224(%rbp)\n"
        "  WT_RESTORE\n"
        "  lea 136(%rsp), %rsp\n  .cfi_adjust_cfa_offset -136\n"
        "  jmp *-8(%rsp)\n"
        "  .cfi_endproc\n"
        ".size wmtrace_probe_tramp, .-wmtrace_probe_tramp\n"
        ".p2align 4\n"
        ".globl wmtrace_probe_exit\n"
        ".hidden wmtrace_probe_exit\n"
        ".type wmtrace_probe_exit,@function\n"
        "wmtrace_probe_exit:\n"
        "  .cfi_startproc\n"
        "  .cfi_undefined %rip\n" /* the caller's address is in wt_tl until probe_return */
        "  lea -128(%rsp), %rsp\n  .cfi_adjust_cfa_offset 128\n"
        "  WT_SAVE\n"
        "  lea 224(%rbp), %rdi\n"
        "  mov %rbp, %rsi\n"
        "  call wmtrace_probe_return\n"
        "  mov %rax, 216(%rbp)\n"
        "  WT_RESTORE\n"
        "  lea 128(%rsp), %rsp\n  .cfi_adjust_cfa_offset -128\n"
        "  jmp *-8(%rsp)\n"
        "  .cfi_endproc\n"
        ".size wmtrace_probe_exit, .-wmtrace_probe_exit\n"
        ".purgem WT_SAVE\n"
        ".purgem WT_RESTORE\n");

void *wmtrace_probe_enter(void **slot, long idx, const uint64_t *regs) HIDDEN;
void *wmtrace_probe_return(void **rsp, const uint64_t *regs) HIDDEN;

/* The registers WT_SAVE pushed, from rbp up: rbp, rbx, r11, r10, r9, r8, rdi, rsi, rdx, rcx, rax,
 * flags. Integer argument N (1-6) is at arg_at[N]; the return value at RAX. */
static const int arg_at[7] = {0, 6, 7, 8, 9, 5, 4};
#define RAX 10

int wt_known_sites;
int wt_load_handles;

/* The release returned: count it, say which load it released (by handle, else the last begun)
 * and what of it malloc still holds, then the process's figures. */
static void released(const char *source, int load, bool by_handle) {
    __atomic_fetch_add(&wt_stats->markers, 1, __ATOMIC_RELAXED);
    wt_line l;
    wt_begin(&l, 'R');
    wt_put_s(&l, source);
    wt_put_i(&l, load);
    wt_put_u(&l, wt_load_kept(load));
    wt_put_i(&l, wt_scratch_resident(load));
    wt_put_s(&l, by_handle ? "handle" : "time");
    wt_put_u(&l, wt_load_kept_resident(load));
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
    released(source, __atomic_load_n(&wt_last_load, __ATOMIC_ACQUIRE) - 1, false);
    wt_tl.in_hook = saved;
}

/* A known runtime's load marker is called for the first time: loads are its calls from now on
 * (a load begun at a weight file's touch ends here). */
static void marker_loads_begin(void) {
    if (__atomic_load_n(&wt_have_load_markers, __ATOMIC_ACQUIRE)) return;
    int cur = __atomic_load_n(&wt_cur_load, __ATOMIC_ACQUIRE);
    if (cur && wt_stats->loads[cur - 1].spec < 0) wt_load_end(cur - 1);
    __atomic_store_n(&wt_have_load_markers, 1, __ATOMIC_RELEASE);
}

/* The entry of a marker that counts (the outermost on its thread). Returns the load begun, or
 * for a release the load it releases (-1 the last begun, by time; -2 not a release of a load:
 * its handle is no live load's). */
static int64_t marker_entered(const probe *p, const wt_spec *sp, uint64_t hval) {
    if (p->kind == 'L') {
        if (sp->known) marker_loads_begin();
        if (sp->handle) __atomic_store_n(&wt_load_handles, 1, __ATOMIC_RELEASE);
        return wt_load_begin(p->spec);
    }
    int64_t load = __atomic_load_n(&wt_last_load, __ATOMIC_ACQUIRE) - 1;
    bool by_handle =
        sp->handle > 10 && sp->handle < 20 && __atomic_load_n(&wt_load_handles, __ATOMIC_ACQUIRE);
    if (by_handle) {
        load = hval ? wt_load_by_handle(hval) : -1;
        if (load < 0) return -2;
    }
    __atomic_fetch_add(&wt_releasing, 1, __ATOMIC_ACQ_REL);
    release_begins();
    wt_line l;
    wt_begin(&l, 'r');
    wt_put_u(&l, (uint64_t)p->spec);
    wt_end(&l);
    return by_handle ? load : -1 - (load + 1) * 4; /* by time: encoded below zero */
}

/* The call's return is hooked: its frame on this thread's stack (false: nested too deep). */
static bool push_frame(void **slot, const probe *p, int64_t arg, uint64_t hval, int counted) {
    int d = wt_tl.ret_depth;
    if (d >= (int)(sizeof wt_tl.ret_stack / sizeof wt_tl.ret_stack[0])) {
        wt_warn("marker returns nested too deep on one thread: a return not seen");
        return false;
    }
    wt_tl.ret_stack[d].ret = *slot;
    wt_tl.ret_stack[d].slot = slot;
    wt_tl.ret_stack[d].kind = p->kind;
    wt_tl.ret_stack[d].spec = p->spec;
    wt_tl.ret_stack[d].arg = arg;
    wt_tl.ret_stack[d].hval = hval;
    wt_tl.ret_stack[d].counted = counted;
    wt_tl.ret_depth = d + 1;
    if (counted && counted != 3 && p->kind == 'L') wt_tl.loads_open++;
    if (counted && counted != 3 && p->kind == 'R') wt_tl.releases_open++;
    *slot = (void *)wmtrace_probe_exit;
    return true;
}

void *wmtrace_probe_enter(void **slot, long idx, const uint64_t *regs) {
    probe *p = &probes[idx];
    if (p->kind == 'D') { /* the dynamic linker's hook: objects came or went */
        struct r_debug *r = (struct r_debug *)wt_r_debug_get();
        if (wt_active && r && r->r_state == RT_CONSISTENT) wt_rescan();
        return p->ool;
    }
    if (!wt_active || !wt_stats) return p->ool;
    int e = errno, saved = wt_tl.in_hook;
    wt_tl.in_hook = 1;
    const wt_spec *sp = &wt_specs[p->spec];
    if (p->kind == 'T') { /* a table's function: its return gives the table */
        __atomic_fetch_add(&wt_stats->specs[p->spec].hits, 1, __ATOMIC_RELAXED);
        push_frame(slot, p, -1, 0, 3);
        wt_tl.in_hook = saved;
        errno = e;
        return p->ool;
    }
    /* A fallback (ggml's buffers) only forwards where a known runtime's marker is hooked. */
    bool used = sp->known != 2 || !__atomic_load_n(&wt_known_sites, __ATOMIC_ACQUIRE);
    if (used) __atomic_fetch_add(&wt_stats->specs[p->spec].hits, 1, __ATOMIC_RELAXED);
    uint64_t hval = sp->handle > 10 ? regs[arg_at[sp->handle % 10]] : 0;
    int counted = used && !wt_tl.loads_open && !wt_tl.releases_open;
    int64_t arg = counted ? marker_entered(p, sp, hval) : -1;
    if (counted && p->kind == 'R' && arg == -2) counted = 2; /* for no load's handle */
    if (!push_frame(slot, p, arg, hval, counted) && counted == 1 && p->kind == 'R')
        __atomic_fetch_sub(&wt_releasing, 1, __ATOMIC_ACQ_REL);
    wt_tl.in_hook = saved;
    errno = e;
    return p->ool;
}

/* A counted marker call returned (frame f of this thread; regs: the registers at the return). */
static void marker_returned(const __typeof__(wt_tl.ret_stack[0]) *f, const uint64_t *regs) {
    const wt_spec *sp = &wt_specs[f->spec];
    if (f->kind == 'L') {
        wt_tl.loads_open--;
        int idx = (int)f->arg;
        if (idx >= 0 && sp->handle) {
            uint64_t h = sp->handle == 1 ? regs[RAX] : sp->handle < 20 ? f->hval : 0;
            if (sp->handle > 20 && f->hval) memcpy(&h, (const void *)(uintptr_t)f->hval, sizeof h);
            __atomic_store_n(&wt_stats->loads[idx].handle, h, __ATOMIC_RELEASE);
        }
        wt_load_end(idx);
        return;
    }
    wt_tl.releases_open--;
    if (f->counted == 2) {
        __atomic_fetch_add(&wt_stats->specs[f->spec].unpaired, 1, __ATOMIC_RELAXED);
        wt_line l;
        wt_begin(&l, 'n');
        wt_put_u(&l, (uint64_t)f->spec);
        wt_put_x(&l, f->hval);
        wt_end(&l);
        return;
    }
    bool by_handle = f->arg >= 0;
    int load = by_handle ? (int)f->arg : (int)((-1 - f->arg) / 4) - 1;
    released(wt_stats->specs[f->spec].text, load, by_handle);
    __atomic_fetch_sub(&wt_releasing, 1, __ATOMIC_ACQ_REL);
}

/* rsp: the stack pointer after the function returned (its slot was just below). Frames left
 * without returning (longjmp, an exception caught above them) are dropped on the way. */
void *wmtrace_probe_return(void **rsp, const uint64_t *regs) {
    int e = errno, saved = wt_tl.in_hook;
    wt_tl.in_hook = 1;
    int d = wt_tl.ret_depth - 1;
    while (d > 0 && wt_tl.ret_stack[d].slot < rsp - 1) {
        int c = wt_tl.ret_stack[d].counted;
        if (c && wt_tl.ret_stack[d].kind == 'L') wt_tl.loads_open--;
        if (c && wt_tl.ret_stack[d].kind == 'R') wt_tl.releases_open--;
        if (c == 1 && wt_tl.ret_stack[d].kind == 'R')
            __atomic_fetch_sub(&wt_releasing, 1, __ATOMIC_ACQ_REL);
        d--;
    }
    wt_tl.ret_depth = d;
    void *ret = wt_tl.ret_stack[d].ret;
    if (wt_tl.ret_stack[d].counted == 3) {
        ort_table(regs[RAX]);
    } else if (wt_tl.ret_stack[d].counted) {
        if (wt_active && wt_stats)
            marker_returned(&wt_tl.ret_stack[d], regs);
        else if (wt_tl.ret_stack[d].kind == 'L')
            wt_tl.loads_open--;
        else
            wt_tl.releases_open--;
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
        uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)(probes[i].ool + ENTRY_STUB);
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
    xsave_setup();
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
