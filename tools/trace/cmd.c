/*
 * cmd.c: `weightmap trace [--file F]... [--load-marker SPEC]... [--cycles-marker SPEC]...
 * [--no-known-markers] [--release-signal SIG] [--strict] [--json] [--svg OUT] [--out REPORT]
 * [--interval MS] -- CMD ARGS...`: runs CMD under libwmtrace.so (LD_PRELOAD) and reports its
 * weight-memory lifecycle: per thread the malloc family, per load its scratch and what it kept,
 * every mapping of a weight file, mlock, each release with the process's figures and their
 * change from the release before; then the facts and the verdict: broken, clean or not judged,
 * each rule's state (docs/TRACE.md). Exit status: 1 when a rule is broken, else CMD's own (128+N
 * when a signal N ended it, 127 when it cannot be run), else 3 with --strict when something was
 * not judged; 2 usage. tracer.h says which file holds what.
 *
 * This file: arguments, the known runtimes' markers and finding the library; running CMD
 * (footprint sampled from outside); cmd_trace.
 */
#include "tracer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef WM_TRACE_LIBDIR
#define WM_TRACE_LIBDIR "lib/weightmap"
#endif

/* ---- arguments, the library ---- */

/* Why a marker spec of kind 'L' or 'R' is malformed, or NULL: SYMBOL, OBJECT:SYMBOL or
 * OBJECT+0xHEX, then =ret, =argN or =*argN (N 1-6; a release's handle is an argument). */
static const char *spec_error(char kind, const char *v) {
    static const char sym_chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                    "0123456789_.$@-";
    if (!*v) return "empty";
    if (strlen(v) >= 90) return "a spec under 90 bytes";
    const char *eq = strchr(v, '=');
    size_t n = eq ? (size_t)(eq - v) : strlen(v);
    if (eq) {
        const char *h = eq + 1;
        bool arg = (!strncmp(h, "arg", 3) && h[3] >= '1' && h[3] <= '6' && !h[4]);
        bool deref = (!strncmp(h, "*arg", 4) && h[4] >= '1' && h[4] <= '6' && !h[5]);
        if (!arg && !deref && strcmp(h, "ret"))
            return "the handle is =ret, =argN or =*argN (N 1-6)";
        if (kind == 'R' && !arg) return "a release marker's handle is an argument: =argN";
    }
    char place[96];
    snprintf(place, sizeof place, "%.*s", (int)n, v);
    char *colon = strchr(place, ':'), *plus = strstr(place, "+0x");
    if (plus) {
        if (plus == place) return "OBJECT+0xOFFSET needs the OBJECT";
        if (!plus[3] || strspn(plus + 3, "0123456789abcdefABCDEF") != strlen(plus + 3))
            return "OBJECT+0xOFFSET needs a hexadecimal offset";
        return NULL;
    }
    const char *symbol = place;
    if (colon) {
        if (colon == place || !colon[1]) return "OBJECT:SYMBOL needs both";
        symbol = colon + 1;
    }
    if (strspn(symbol, sym_chars) != strlen(symbol))
        return "a symbol is letters, digits and _ . $ @ (C++ names mangled)";
    return NULL;
}

/* A marker spec of kind 'L' (load) or 'R' (release). */
static int take_marker(trace_args *a, char kind, const char *v) {
    if (a->n_markers == MAX_MARKERS) return cli_usage("trace: at most %d markers", MAX_MARKERS);
    const char *why = spec_error(kind, v);
    if (why) return cli_usage("trace: marker '%s': %s", v, why);
    static char buf[MAX_MARKERS][96];
    snprintf(buf[a->n_markers], sizeof buf[0], "%c %s", kind, v);
    a->markers[a->n_markers] = buf[a->n_markers];
    a->n_markers++;
    return -1;
}

/* The release signal a name or number gives (SIG optional: USR1, USR2, RTMIN+N, 1-64); 0 none. A
 * signal that ends or stops a process by the kernel's hand (KILL, STOP) or that the tracer's
 * hooks own (TRAP) is refused. */
static int signal_number(const char *v) {
    if (!strncmp(v, "SIG", 3)) v += 3;
    char *end;
    long n = strtol(v, &end, 10);
    if (end != v && !*end)
        return n > 0 && n <= SIGRTMAX && n != SIGKILL && n != SIGSTOP && n != SIGTRAP ? (int)n : 0;
    if (!strcmp(v, "USR1")) return SIGUSR1;
    if (!strcmp(v, "USR2")) return SIGUSR2;
    if (!strncmp(v, "RTMIN+", 6)) {
        n = strtol(v + 6, &end, 10);
        if (end != v + 6 && !*end && n >= 0 && SIGRTMIN + n <= SIGRTMAX) return SIGRTMIN + (int)n;
    }
    return 0;
}

/* The option just read (the table in cli/commands.c lists them, with --interval's range). */
static int take_option(trace_args *a, const cli_args *p) {
    const char *v = p->value;
    if (cli_is(p, "json")) {
        a->json = true;
    } else if (cli_is(p, "file")) {
        if (a->n_files == MAX_NAMED) return cli_usage("trace: at most %d --file", MAX_NAMED);
        struct stat st;
        if (stat(v, &st) != 0) {
            fprintf(stderr,
                    "weightmap: trace: --file %s: %s (--file names a file that exists before "
                    "the program starts: make it first)\n",
                    v, strerror(errno));
            return 1;
        }
        a->files[a->n_files++] = v;
    } else if (cli_is(p, "cycles-marker") || cli_is(p, "release-marker")) {
        return take_marker(a, 'R', v);
    } else if (cli_is(p, "load-marker")) {
        return take_marker(a, 'L', v);
    } else if (cli_is(p, "strict")) {
        a->strict = true;
    } else if (cli_is(p, "no-known-markers")) {
        a->no_known = true;
    } else if (cli_is(p, "release-signal")) {
        a->release_signal = signal_number(v);
        if (a->release_signal <= 0)
            return cli_usage("trace: --release-signal %s: a signal number, USR1, USR2 or RTMIN+N",
                             v);
    } else if (cli_is(p, "svg")) {
        a->svg = v;
    } else if (cli_is(p, "out")) {
        a->out = v;
    } else if (cli_is(p, "interval")) {
        uint64_t ms;
        if (cli_value_u64(p, &ms)) return 2;
        a->interval_ms = (unsigned)ms;
    }
    return -1;
}

/* Options up to CMD (the first argument that is not one, or what follows "--"). */
static int parse_args(int argc, char **argv, trace_args *a) {
    memset(a, 0, sizeof *a);
    a->interval_ms = 2;
    a->release_signal = SIGRTMIN + 4;
    cli_args p;
    cli_args_init(&p, "trace", argc, argv);
    for (int k; (k = cli_next(&p)) != CLI_END;) {
        if (k == CLI_ERROR) return 2;
        if (k == CLI_ARG) {
            a->cmd = argv + p.i - 1;
            return -1;
        }
        int rc = take_option(a, &p);
        if (rc >= 0) return rc;
    }
    return cli_usage("trace: no command to run (weightmap trace [options] -- CMD ARGS...)");
}

/* libwmtrace.so: $WEIGHTMAP_TRACE_LIB, else next to this binary, else the install path relative
 * to it (BINDIR/../LIBDIR/weightmap). */
static bool find_lib(char out[PATH_MAX], size_t cap) {
    const char *e = getenv("WEIGHTMAP_TRACE_LIB");
    if (e && *e) {
        snprintf(out, cap, "%s", e);
        return access(out, R_OK) == 0;
    }
    char exe[PATH_MAX - 64 - sizeof WM_TRACE_LIBDIR];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return false;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return false;
    *slash = 0;
    snprintf(out, cap, "%s/libwmtrace.so", exe);
    if (access(out, R_OK) == 0) return true;
    snprintf(out, cap, "%s/../%s/libwmtrace.so", exe, WM_TRACE_LIBDIR);
    return access(out, R_OK) == 0;
}

/* ---- the known runtimes' markers ---- */

/* Load and release entry points of the field's runtimes, markers by default where their symbols
 * are visible (--no-known-markers: none). Each says where its handle is, so that a release is
 * paired with the load whose handle it receives. A call inside another marker's call on the same
 * thread is part of it (llama_model_free runs llama_model's destructor; whisper's init runs its
 * _no_state twin). ggml's backend buffers are a fallback: used only where no other runtime's
 * marker was hooked. ONNX Runtime's C API is a table of function pointers, its library stripped
 * to OrtGetApiBase: the interposer hooks CreateSession, CreateSessionFromArray and
 * ReleaseSession through the table that function returns (probe.c). */
static const struct known {
    char kind;
    const char *spec, *runtime;
} known_markers[] = {
    {'L', "llama_model_load_from_file=ret", "llama.cpp"},
    {'L', "llama_model_load_from_splits=ret", "llama.cpp"},
    {'L', "llama_load_model_from_file=ret", "llama.cpp"},
    {'R', "llama_model_free=arg1", "llama.cpp"},
    {'R', "llama_free_model=arg1", "llama.cpp"},
    {'R', "_ZN11llama_modelD2Ev=arg1", "llama.cpp"},
    {'L', "whisper_init_from_file_with_params=ret", "whisper.cpp"},
    {'L', "whisper_init_from_buffer_with_params=ret", "whisper.cpp"},
    {'L', "whisper_init_with_params=ret", "whisper.cpp"},
    {'L', "whisper_init_from_file_with_params_no_state=ret", "whisper.cpp"},
    {'L', "whisper_init_from_buffer_with_params_no_state=ret", "whisper.cpp"},
    {'L', "whisper_init_with_params_no_state=ret", "whisper.cpp"},
    {'R', "whisper_free=arg1", "whisper.cpp"},
    {'L', "new_sd_ctx=ret", "stable-diffusion.cpp"},
    {'R', "free_sd_ctx=arg1", "stable-diffusion.cpp"},
    {'L', "new_upscaler_ctx=ret", "stable-diffusion.cpp"},
    {'R', "free_upscaler_ctx=arg1", "stable-diffusion.cpp"},
    {'T', "OrtGetApiBase", "onnxruntime"},
    {'L', "wm_model_load=*arg3", "weightmap"},
    {'R', "wm_model_release=arg1", "weightmap"},
    {'L', "ggml_backend_buft_alloc_buffer=ret", "ggml"},
    {'R', "ggml_backend_buffer_free=arg1", "ggml"},
};

/* The symbol a spec names (no OBJECT, no handle), for comparing the user's with the known. */
static void spec_symbol(const char *spec, char *out, size_t cap) {
    const char *c = strchr(spec, ':');
    const char *p = c ? c + 1 : spec;
    snprintf(out, cap, "%.*s", (int)strcspn(p, "="), p);
}

/* WMTRACE_MARKERS: the user's markers, then the known ones they do not name already. */
static void markers_env(const trace_args *a, char *out, size_t cap) {
    size_t n = 0;
    for (int i = 0; i < a->n_markers; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? "\n" : "", a->markers[i]);
    for (size_t k = 0; !a->no_known && k < sizeof known_markers / sizeof *known_markers; k++) {
        char mine[128], theirs[128];
        spec_symbol(known_markers[k].spec, mine, sizeof mine);
        bool named = false;
        for (int i = 0; i < a->n_markers; i++) {
            spec_symbol(a->markers[i] + 2, theirs, sizeof theirs);
            named |= !strcmp(mine, theirs);
        }
        if (!named && n < cap)
            n += (size_t)snprintf(out + n, cap - n, "%s%c %s %s", n ? "\n" : "",
                                  known_markers[k].kind == 'L'   ? 'l'
                                  : known_markers[k].kind == 'T' ? 't'
                                                                 : 'r',
                                  known_markers[k].spec, known_markers[k].runtime);
    }
}

/* ---- running the command ---- */

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t kb_field(const char *buf, const char *key) {
    const char *p = strstr(buf, key);
    return p ? strtoull(p + strlen(key), NULL, 10) * 1024 : 0;
}

static bool read_small(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    close(fd);
    buf[n] = 0;
    return n > 0;
}

/* One footprint sample of the child from outside: RssAnon + VmSwap + RssShmem, and VmRSS, from
 * /proc/PID/status (the kernel's counters; smaps_rollup would walk the child's page tables under
 * its mmap lock every few milliseconds). */
static void sample_child(trace *t) {
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)t->pid);
    /* A process that has exited (a zombie until waited for) has no memory lines: no sample. */
    if (!read_small(path, buf, sizeof buf) || !strstr(buf, "\nRssAnon:")) return;
    uint64_t fp = kb_field(buf, "\nRssAnon:") + kb_field(buf, "\nVmSwap:") +
                  kb_field(buf, "\nRssShmem:"),
             rss = kb_field(buf, "\nVmRSS:");
    double when = (double)(mono_ns() - t->t0_ns) / 1e9;
    GROW(t->samples, t->n_samples, t->cap_samples);
    t->samples[t->n_samples++] = (tsample){.t = when, .footprint = fp, .rss = rss};
}

static int run_child(trace *t, const char *lib, const char *out) {
    char named[MAX_NAMED * (PATH_MAX + 1) + 1] = "";
    size_t nl = 0;
    for (int i = 0; i < t->args.n_files; i++) {
        char abs[PATH_MAX];
        const char *p = realpath(t->args.files[i], abs) ? abs : t->args.files[i];
        nl += (size_t)snprintf(named + nl, sizeof named - nl, "%s%s", i ? "\n" : "", p);
    }
    t->t0_ns = mono_ns();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "weightmap: trace: fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        char pre[2 * PATH_MAX + 2], pidbuf[24];
        const char *old = getenv("LD_PRELOAD");
        snprintf(pre, sizeof pre, "%s%s%s", lib, old && *old ? " " : "", old ? old : "");
        snprintf(pidbuf, sizeof pidbuf, "%d", (int)getpid());
        setenv("LD_PRELOAD", pre, 1);
        setenv(WMTRACE_ENV_OUT, out, 1);
        setenv(WMTRACE_ENV_PID, pidbuf, 1);
        if (nl) setenv(WMTRACE_ENV_FILES, named, 1);
        char markers[WMTRACE_MAX_SPECS * 128] = "", sig[16];
        markers_env(&t->args, markers, sizeof markers);
        if (markers[0]) setenv(WMTRACE_ENV_MARKERS, markers, 1);
        snprintf(sig, sizeof sig, "%d", t->args.release_signal);
        setenv(WMTRACE_ENV_SIGNAL, sig, 1);
        execvp(t->args.cmd[0], t->args.cmd);
        fprintf(stderr, "weightmap: trace: %s: %s\n", t->args.cmd[0], strerror(errno));
        _exit(127);
    }
    t->pid = pid;
    /* While CMD runs the tracer takes no signal that the terminal sends to both. */
    struct sigaction ign = {0}, old_int, old_quit;
    ign.sa_handler = SIG_IGN;
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    struct timespec nap = {0, (long)t->args.interval_ms * 1000000L};
    for (;;) {
        pid_t w = waitpid(pid, &t->status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) {
            fprintf(stderr, "weightmap: trace: waitpid: %s\n", strerror(errno));
            return 1;
        }
        sample_child(t);
        nanosleep(&nap, NULL);
    }
    t->t_end = (double)(mono_ns() - t->t0_ns) / 1e9;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    return 0;
}

/* ---- reading the trace file ---- */

/* The one release of a trace: what reading and judging it acquired (safe on a partial one). */
static void trace_free(trace *t) {
    if (t->st) munmap(t->st, sizeof(wmtrace_stats));
    free(t->maps);
    free(t->ev);
    free(t->samples);
    free(t->rel);
    free(t->v);
    memset(t, 0, sizeof *t);
}

static int traced_run(trace *t, const char *lib, const char *out, int fd);

/* CMD can be run: a path that is an executable file, or a name found in PATH (as execvp). */
static bool runnable(const char *cmd) {
    struct stat st;
    if (strchr(cmd, '/'))
        return access(cmd, X_OK) == 0 && stat(cmd, &st) == 0 && !S_ISDIR(st.st_mode);
    const char *path = getenv("PATH");
    if (!path) path = "/bin:/usr/bin";
    for (const char *p = path;; p++) {
        size_t n = strcspn(p, ":");
        char full[PATH_MAX];
        snprintf(full, sizeof full, "%.*s%s%s", (int)n, n ? p : ".", "/", cmd);
        if (access(full, X_OK) == 0 && stat(full, &st) == 0 && !S_ISDIR(st.st_mode)) return true;
        p += n;
        if (!*p) return false;
    }
}

int cmd_trace(int argc, char **argv) {
    trace t;
    memset(&t, 0, sizeof t);
    int rc = parse_args(argc, argv, &t.args);
    if (rc >= 0) return rc;
    if (!runnable(t.args.cmd[0])) {
        fprintf(stderr, "weightmap: trace: %s: %s\n", t.args.cmd[0],
                strchr(t.args.cmd[0], '/') ? "not an executable file" : "command not found");
        return 127;
    }
    char lib[PATH_MAX];
    if (!find_lib(lib, sizeof lib)) {
        fprintf(stderr,
                "weightmap: trace: libwmtrace.so not found (next to the weightmap binary, in its "
                "../" WM_TRACE_LIBDIR ", or $WEIGHTMAP_TRACE_LIB)\n");
        return 1;
    }
    const char *tmp = getenv("TMPDIR");
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s/wmtrace-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(out);
    if (fd < 0) {
        fprintf(stderr, "weightmap: trace: %s: %s\n", out, strerror(errno));
        return 1;
    }
    if (ftruncate(fd, (off_t)sizeof(wmtrace_stats)) != 0) {
        fprintf(stderr, "weightmap: trace: %s: %s\n", out, strerror(errno));
        close(fd);
        unlink(out);
        return 1;
    }
    fflush(NULL);
    rc = traced_run(&t, lib, out, fd);
    close(fd);
    unlink(out);
    trace_free(&t);
    return rc;
}

/* On stderr: how CMD ended if a signal ended it, each broken rule, each rule not judged and each
 * marker that matched nothing (the report has the same). */
static void stderr_summary(const trace *t) {
    if (WIFSIGNALED(t->status))
        fprintf(stderr,
                "weightmap: trace: %s was ended by signal %d (%s): the report shows what it "
                "did until then\n",
                t->args.cmd[0], WTERMSIG(t->status), strsignal(WTERMSIG(t->status)));
    for (int i = 0; i < t->n_v; i++)
        if (t->v[i].rule)
            fprintf(stderr, "weightmap: trace: rule %s: %s\n", t->v[i].rule, t->v[i].msg);
    for (int k = 0; k < N_RULES; k++)
        if (!t->rules[k].broken && !t->rules[k].judged)
            fprintf(stderr, "weightmap: trace: rule %s not judged: %s\n", t->rules[k].rule,
                    t->rules[k].how);
    if (!t->n_rel) fprintf(stderr, "weightmap: trace: %s\n", trace_no_release_hint(t));
    for (uint64_t k = 0; k < t->st->n_specs && k < WMTRACE_MAX_SPECS; k++) {
        const wmtrace_spec *s = &t->st->specs[k];
        if (s->known || s->sites) continue;
        fprintf(stderr,
                "weightmap: trace: marker %s matched nothing (searched %" PRIu64 " object%s:",
                s->text, s->searched, s->searched == 1 ? "" : "s");
        for (int i = 0; i < t->n_objects && i < 12; i++)
            fprintf(stderr, " %s", t->objects[i].name);
        fprintf(stderr, "%s)\n", t->n_objects > 12 ? " ..." : "");
    }
}

/* Runs CMD, reads its trace, judges and reports; returns the exit status of `trace`. */
static int traced_run(trace *t, const char *lib, const char *out, int fd) {
    int rc = run_child(t, lib, out);
    if (rc == 0) rc = trace_read(t, fd);
    if (rc != 0) return rc;
    if (t->st->magic != WMTRACE_MAGIC) {
        /* 127: CMD could not be run, and the child said why. */
        if (trace_exit_of(t->status) != 127)
            fprintf(stderr,
                    "weightmap: trace: %s did not load libwmtrace.so (a static binary, or "
                    "setuid?); nothing was traced\n",
                    t->args.cmd[0]);
        return trace_exit_of(t->status) ? trace_exit_of(t->status) : 1;
    }
    trace_judge(t);
    if (t->args.out && !freopen(t->args.out, "w", stdout)) {
        fprintf(stderr, "weightmap: %s: %s\n", t->args.out, strerror(errno));
        return 1;
    }
    if (t->args.json)
        trace_report_json(t);
    else
        trace_report_text(t);
    fflush(stdout);
    stderr_summary(t);
    int svg_rc = t->args.svg ? trace_write_svg(t, t->args.svg) : 0;
    int own = trace_exit_of(t->status);
    if (t->broken || svg_rc) return 1;
    if (own) return own;
    return t->args.strict && t->not_judged ? 3 : 0;
}
