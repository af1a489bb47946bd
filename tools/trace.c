/*
 * trace.c: `weightmap trace [--file F]... [--cycles-marker SYMBOL] [--json] [--svg OUT]
 * [--out REPORT] [--interval MS] -- CMD ARGS...`: runs CMD under libwmtrace.so (tools/trace/,
 * LD_PRELOAD) and reports its weight-memory lifecycle: per thread the malloc family (largest block,
 * bytes held at exit by size class), every mapping of a weight file with its flags and times,
 * mlock, the release markers and the footprint over time; then the verdicts (docs/TRACE.md). Exit
 * status: 1 when a rule is broken, else CMD's own (128+N when a signal N ended it), 2 usage.
 *
 * Sections: arguments and finding the library; running CMD (footprint sampled from outside);
 * reading the trace file; the verdicts; the text and JSON reports; the SVG picture.
 */
#include "cli.h"
#include "trace/wmtrace.h"

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
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

#define MAX_NAMED 64

typedef struct trace_args {
    const char *files[MAX_NAMED];
    int n_files;
    const char *marker;
    bool json;
    const char *svg;
    const char *out; /* the report to this file, not stdout */
    unsigned interval_ms;
    char **cmd;
} trace_args;

typedef struct tfile {
    char path[700];
    uint64_t size;
    char kind[16];
    int opens, maps;
} tfile;

typedef struct tmap {
    int id, fidx;
    uint64_t addr, len, off;
    int prot, flags;
    int64_t tid;
    double t_map, t_unmap; /* seconds from the start; t_unmap < 0: still mapped */
    uint64_t left;
    bool after_release; /* alive after a release (rule 2) */
} tmap;

typedef struct tevent {
    double t;
    char type;
    uint64_t a, b, c;
    int64_t rc;
    char text[64];
} tevent;

typedef struct tsample {
    double t;
    uint64_t footprint, rss;
    bool inside; /* taken by the process itself at an event (an S line) */
} tsample;

typedef struct verdict {
    const char *rule;
    char msg[512];
} verdict;

typedef struct trace {
    trace_args args;
    pid_t pid;
    int status;
    uint64_t t0_ns;
    double t_start, t_end; /* the first process image's start, CMD's end */
    bool exited_normally;
    wmtrace_stats *st;
    tfile files[64];
    int n_files;
    tmap *maps;
    int n_maps, cap_maps;
    tevent *ev; /* locks, releases, warnings */
    int n_ev, cap_ev;
    tsample *samples;
    int n_samples, cap_samples;
    verdict *v;
    int n_v, cap_v;
    int releases;
} trace;

#define GROW(arr, n, cap)                                                                          \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            size_t nc = (cap) ? (size_t)(cap)*2 : 64;                                              \
            void *np = realloc((arr), nc * sizeof *(arr));                                         \
            if (!np) {                                                                             \
                fputs("weightmap: trace: out of memory\n", stderr);                                \
                exit(1);                                                                           \
            }                                                                                      \
            (arr) = np;                                                                            \
            (cap) = (int)nc;                                                                       \
        }                                                                                          \
    } while (0)

/* ---- arguments, the library ---- */

static int usage_help(void) {
    printf("usage: weightmap trace [--file F]... [--cycles-marker SYMBOL] [--json] [--svg OUT]\n"
           "                       [--out REPORT] [--interval MS] -- CMD ARGS...\n"
           "  Runs CMD with libwmtrace.so preloaded and reports its weight-memory lifecycle:\n"
           "  malloc per thread, every mapping of a weight file (F, or any GGUF/safetensors file\n"
           "  over 1 MiB), mlock, the footprint over time; then the verdicts. --cycles-marker:\n"
           "  the return of SYMBOL (a dynamic symbol) means \"the model is released\" (SIGUSR1\n"
           "  from the program and the end of the process count too). Exit: 1 when a rule is\n"
           "  broken, else CMD's status (128+N for signal N). docs/TRACE.md has the rules.\n");
    return 0;
}

static int parse_args(int argc, char **argv, trace_args *a) {
    memset(a, 0, sizeof *a);
    a->interval_ms = 2;
    int i = 0;
    for (; i < argc; i++) {
        const char *s = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(s, "--")) {
            i++;
            break;
        }
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) exit(usage_help());
        if (!strcmp(s, "--json")) {
            a->json = true;
        } else if (!strcmp(s, "--file") || !strcmp(s, "--cycles-marker") || !strcmp(s, "--svg") ||
                   !strcmp(s, "--interval") || !strcmp(s, "--out")) {
            if (!v || !*v) return cli_usage("trace: %s needs a value", s);
            i++;
            if (s[2] == 'f') {
                if (a->n_files == MAX_NAMED)
                    return cli_usage("trace: at most %d --file", MAX_NAMED);
                struct stat st;
                if (stat(v, &st) != 0) {
                    fprintf(stderr, "weightmap: %s: %s\n", v, strerror(errno));
                    return 1;
                }
                a->files[a->n_files++] = v;
            } else if (s[2] == 'c') {
                if (strlen(v) >= 64)
                    return cli_usage("trace: --cycles-marker: a symbol name under 64 bytes");
                a->marker = v;
            } else if (s[2] == 's') {
                a->svg = v;
            } else if (s[2] == 'o') {
                a->out = v;
            } else {
                uint64_t ms;
                if (!cli_parse_u64(v, &ms) || ms == 0 || ms > 10000)
                    return cli_usage("trace: --interval wants milliseconds (1-10000), not '%s'", v);
                a->interval_ms = (unsigned)ms;
            }
        } else if (s[0] == '-') {
            return cli_usage("trace: unknown option '%s'", s);
        } else {
            break; /* the command starts here ("--" is optional when CMD does not start with -) */
        }
    }
    if (i >= argc)
        return cli_usage("trace: no command to run (weightmap trace [options] -- CMD ARGS...)");
    a->cmd = argv + i;
    return -1;
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
    t->samples[t->n_samples++] = (tsample){when, fp, rss, false};
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
        if (t->args.marker) setenv(WMTRACE_ENV_MARKER, t->args.marker, 1);
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

static tmap *find_map(trace *t, int id) {
    for (int i = t->n_maps - 1; i >= 0; i--)
        if (t->maps[i].id == id && t->maps[i].t_unmap < 0) return &t->maps[i];
    return NULL;
}

static void add_event(trace *t, double when, char type, uint64_t a, uint64_t b, int64_t rc,
                      uint64_t c, const char *text) {
    GROW(t->ev, t->n_ev, t->cap_ev);
    tevent *e = &t->ev[t->n_ev++];
    memset(e, 0, sizeof *e);
    e->t = when;
    e->type = type;
    e->a = a;
    e->b = b;
    e->c = c;
    e->rc = rc;
    if (text) snprintf(e->text, sizeof e->text, "%s", text);
}

static void parse_line(trace *t, char *ln) {
    char *rest;
    uint64_t ns = strtoull(ln, &rest, 10);
    int64_t tid = strtoll(rest, &rest, 10);
    while (*rest == ' ')
        rest++;
    char type = *rest ? *rest++ : 0;
    while (*rest == ' ')
        rest++;
    double when = ns >= t->t0_ns ? (double)(ns - t->t0_ns) / 1e9 : 0;
    char *p = rest;
    switch (type) {
    case 'X':
        if (t->t_start == 0) t->t_start = when;
        /* A new process image: what the old one mapped is gone with it. */
        for (int i = 0; i < t->n_maps; i++)
            if (t->maps[i].t_unmap < 0) t->maps[i].t_unmap = when;
        t->exited_normally = false;
        break;
    case 'F': {
        int idx = (int)strtol(p, &p, 10);
        if (idx < 0 || idx >= 64) return;
        tfile *f = &t->files[idx];
        f->size = strtoull(p, &p, 10);
        while (*p == ' ')
            p++;
        size_t k = strcspn(p, " ");
        snprintf(f->kind, sizeof f->kind, "%.*s", (int)k, p);
        p += k;
        if (*p == ' ') p++;
        snprintf(f->path, sizeof f->path, "%s", p);
        if (idx >= t->n_files) t->n_files = idx + 1;
        break;
    }
    case 'O': {
        int idx = (int)strtol(p, &p, 10);
        if (idx >= 0 && idx < 64) t->files[idx].opens++;
        add_event(t, when, 'O', (uint64_t)idx, 0, 0, 0, NULL);
        break;
    }
    case 'M': {
        GROW(t->maps, t->n_maps, t->cap_maps);
        tmap *m = &t->maps[t->n_maps++];
        memset(m, 0, sizeof *m);
        m->id = (int)strtol(p, &p, 10);
        m->fidx = (int)strtol(p, &p, 10);
        m->addr = strtoull(p, &p, 16);
        m->len = strtoull(p, &p, 10);
        m->off = strtoull(p, &p, 10);
        m->prot = (int)strtol(p, &p, 10);
        m->flags = (int)strtol(p, &p, 10);
        m->tid = tid;
        m->t_map = when;
        m->t_unmap = -1;
        m->left = m->len;
        if (m->fidx >= 0 && m->fidx < 64) t->files[m->fidx].maps++;
        add_event(t, when, 'M', (uint64_t)(t->n_maps - 1), 0, 0, 0, NULL);
        break;
    }
    case 'U': {
        int id = (int)strtol(p, &p, 10);
        strtoull(p, &p, 10);
        uint64_t left = strtoull(p, &p, 10);
        tmap *m = find_map(t, id);
        if (m) {
            m->left = left;
            if (left == 0) m->t_unmap = when;
        }
        break;
    }
    case 'L':
    case 'K': {
        uint64_t a = strtoull(p, &p, 16), n = strtoull(p, &p, 10);
        int64_t rc = strtoll(p, &p, 10);
        uint64_t w = strtoull(p, &p, 10);
        add_event(t, when, type, a, n, rc, w, NULL);
        break;
    }
    case 'A':
    case 'Z': {
        uint64_t fl = type == 'A' ? strtoull(p, &p, 10) : 0;
        int64_t rc = strtoll(p, &p, 10);
        add_event(t, when, type, fl, 0, rc, 0, NULL);
        break;
    }
    case 'R':
        t->releases++;
        add_event(t, when, 'R', 0, 0, 0, 0, p);
        break;
    case 'S': {
        uint64_t fp = strtoull(p, &p, 10), rss = strtoull(p, &p, 10);
        GROW(t->samples, t->n_samples, t->cap_samples);
        t->samples[t->n_samples++] = (tsample){when, fp, rss, true};
        break;
    }
    case 'Q': t->exited_normally = true; break;
    case 'W': add_event(t, when, 'W', 0, 0, 0, 0, p); break;
    default: break;
    }
}

static int cmp_sample(const void *a, const void *b) {
    double x = ((const tsample *)a)->t, y = ((const tsample *)b)->t;
    return x < y ? -1 : x > y;
}

static int read_trace(trace *t, int fd) {
    void *m = mmap(NULL, sizeof(wmtrace_stats), PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "weightmap: trace: reading the trace file: %s\n", strerror(errno));
        return 1;
    }
    t->st = m;
    struct stat sb;
    if (fstat(fd, &sb) != 0) return 1;
    size_t n =
        (size_t)sb.st_size > sizeof(wmtrace_stats) ? (size_t)sb.st_size - sizeof(wmtrace_stats) : 0;
    char *buf = malloc(n + 1);
    if (!buf) return 1;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)(sizeof(wmtrace_stats) + got));
        if (r <= 0) break;
        got += (size_t)r;
    }
    buf[got] = 0;
    for (char *ln = buf; *ln;) {
        char *nl = strchr(ln, '\n');
        if (!nl) break; /* a line cut short by a killed process */
        *nl = 0;
        parse_line(t, ln);
        ln = nl + 1;
    }
    free(buf);
    /* Samples taken before CMD was exec'd show the tracer's own copy: drop them. */
    int kept = 0;
    for (int i = 0; i < t->n_samples; i++)
        if (t->samples[i].t >= t->t_start) t->samples[kept++] = t->samples[i];
    t->n_samples = kept;
    qsort(t->samples, (size_t)t->n_samples, sizeof *t->samples, cmp_sample);
    return 0;
}

/* ---- verdicts ---- */

static void add_verdict(trace *t, const char *rule, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void add_verdict(trace *t, const char *rule, const char *fmt, ...) {
    GROW(t->v, t->n_v, t->cap_v);
    verdict *v = &t->v[t->n_v++];
    v->rule = rule;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof v->msg, fmt, ap);
    va_end(ap);
}

static const char *fname(const trace *t, int fidx) {
    if (fidx < 0 || fidx >= t->n_files || !t->files[fidx].path[0]) return "?";
    const char *s = strrchr(t->files[fidx].path, '/');
    return s ? s + 1 : t->files[fidx].path;
}

static bool private_writable(const tmap *m) {
    return (m->flags & MAP_PRIVATE) && (m->prot & PROT_WRITE);
}

static void judge(trace *t) {
    char b1[32];
    /* 1. malloc over 64 KiB on a loader thread while it loads. */
    for (uint64_t i = 0; i < t->st->n_threads && i < WMTRACE_MAX_THREADS; i++) {
        const wmtrace_thread *th = &t->st->threads[i];
        if (th->loader && th->largest_loading > WMTRACE_BIG)
            add_verdict(t, "scratch",
                        "thread %" PRId64
                        " (%.16s) loads a weight file and took %s from malloc while "
                        "loading (over 64 KiB; large memory should be page-allocated and returned)",
                        th->tid, th->name, cli_bytes(th->largest_loading, b1));
    }
    /* 2. mappings alive after a release (a marker, or the end of the process). */
    for (int i = 0; i < t->n_maps; i++) {
        tmap *m = &t->maps[i];
        double until = m->t_unmap < 0 ? 1e300 : m->t_unmap;
        const tevent *rel = NULL;
        for (int k = 0; k < t->n_ev && !rel; k++)
            if (t->ev[k].type == 'R' && t->ev[k].t >= m->t_map && t->ev[k].t < until)
                rel = &t->ev[k];
        if (rel)
            add_verdict(t, "released",
                        "mapping #%d of %s (%s at offset %" PRIu64
                        ") still mapped after the release "
                        "at %.6f s (%s)",
                        m->id, fname(t, m->fidx), cli_bytes(m->len, b1), m->off, rel->t, rel->text);
        else if (m->t_unmap < 0)
            add_verdict(t, "released",
                        "mapping #%d of %s (%s at offset %" PRIu64
                        ") still mapped at the end of the process",
                        m->id, fname(t, m->fidx), cli_bytes(m->len, b1), m->off);
        m->after_release = rel || m->t_unmap < 0;
    }
    /* 3. more live mappings of the same bytes than loads (opens since the last release). */
    for (int i = 0; i < t->n_ev; i++) {
        if (t->ev[i].type != 'M') continue;
        const tmap *m = &t->maps[t->ev[i].a];
        double now = m->t_map, last_rel = -1;
        int opens = 0, depth = 0;
        for (int k = 0; k < i; k++)
            if (t->ev[k].type == 'R') last_rel = t->ev[k].t;
        for (int k = 0; k < i; k++)
            if (t->ev[k].type == 'O' && (int)t->ev[k].a == m->fidx && t->ev[k].t > last_rel)
                opens++;
        for (int k = 0; k < t->n_maps; k++) {
            const tmap *o = &t->maps[k];
            if (o->fidx != m->fidx || o->t_map > now || (o->t_unmap >= 0 && o->t_unmap <= now))
                continue;
            if (o->off < m->off + m->len && m->off < o->off + o->len) depth++;
        }
        if (depth > (opens ? opens : 1)) {
            add_verdict(
                t, "loads",
                "%d live mappings of the same bytes of %s at %.6f s after %d load%s since the "
                "last release",
                depth, fname(t, m->fidx), now, opens, opens == 1 ? "" : "s");
            break;
        }
    }
    /* 4. private writable mappings of weight files. */
    for (int i = 0; i < t->n_maps; i++)
        if (private_writable(&t->maps[i]))
            add_verdict(t, "private",
                        "mapping #%d of %s is MAP_PRIVATE with PROT_WRITE: privatises on read "
                        "(every page it touches can become a private copy; %s charged at map time)",
                        t->maps[i].id, fname(t, t->maps[i].fidx), cli_bytes(t->maps[i].len, b1));
}

/* ---- reports ---- */

static int exit_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

/* The footprint the process measured itself right after a release at `when` (its S line). */
static uint64_t release_footprint(const trace *t, double when) {
    for (int i = 0; i < t->n_samples; i++)
        if (t->samples[i].inside && t->samples[i].t >= when) return t->samples[i].footprint;
    return 0;
}

static void fp_figures(const trace *t, uint64_t *start, uint64_t *peak, uint64_t *end) {
    *start = *peak = *end = 0;
    for (int i = 0; i < t->n_samples; i++) {
        if (i == 0) *start = t->samples[i].footprint;
        if (t->samples[i].footprint > *peak) *peak = t->samples[i].footprint;
        *end = t->samples[i].footprint;
    }
}

static void flags_text(const tmap *m, char *out, size_t cap) {
    snprintf(out, cap, "%s%s%s|%s%s", m->prot & PROT_READ ? "R" : "",
             m->prot & PROT_WRITE ? "W" : "", m->prot & PROT_EXEC ? "X" : "",
             m->flags & MAP_PRIVATE ? "MAP_PRIVATE" : "MAP_SHARED",
             private_writable(m) ? " (privatises on read)" : "");
}

static void report_text(const trace *t) {
    char b[6][32];
    const wmtrace_stats *st = t->st;
    printf("weightmap trace: %s (pid %d): exit %d, %.3f s, %s\n", t->args.cmd[0], (int)t->pid,
           exit_of(t->status), t->t_end, t->exited_normally ? "normal exit" : "no normal exit");
    printf("\nthreads (malloc family; held at exit by size class):\n");
    printf("  %-8s %-16s %-6s %9s %10s %10s %10s %10s %10s %10s %10s\n", "tid", "name", "loader",
           "allocs", "largest", "while-load", "<64K", "64K-1M", "1M-16M", ">=16M", "anon-held");
    for (uint64_t i = 0; i < st->n_threads && i < WMTRACE_MAX_THREADS; i++) {
        const wmtrace_thread *th = &st->threads[i];
        char h[4][32];
        for (int c = 0; c < 4; c++)
            snprintf(h[c], 32, "%s%s", th->held[c] < 0 ? "-" : "",
                     cli_bytes((uint64_t)(th->held[c] < 0 ? -th->held[c] : th->held[c]), b[c]));
        printf("  %-8" PRId64 " %-16.16s %-6s %9" PRIu64 " %10s %10s %10s %10s %10s %10s %10s\n",
               th->tid, th->name, th->loader ? "yes" : "no", th->n_alloc,
               cli_bytes(th->largest, b[4]), cli_bytes(th->largest_loading, b[5]), h[0], h[1], h[2],
               h[3], cli_bytes((uint64_t)(th->anon_held > 0 ? th->anon_held : 0), b[0]));
    }
    if (st->dropped_threads || st->dropped_blocks)
        printf("  (not counted: %" PRIu64 " threads, %" PRIu64 " big blocks: tables full)\n",
               st->dropped_threads, st->dropped_blocks);
    printf("\nweight files:\n");
    if (!t->n_files) printf("  none seen\n");
    for (int i = 0; i < t->n_files; i++) {
        int live = 0;
        for (int k = 0; k < t->n_maps; k++)
            if (t->maps[k].fidx == i && t->maps[k].t_unmap < 0) live++;
        printf("  [%d] %s (%s, %s): opened %d times, %d mappings, %d live at the end\n", i,
               t->files[i].path, t->files[i].kind, cli_bytes(t->files[i].size, b[0]),
               t->files[i].opens, t->files[i].maps, live);
    }
    if (t->n_maps) printf("\nmappings:\n");
    for (int i = 0; i < t->n_maps; i++) {
        const tmap *m = &t->maps[i];
        char fl[64];
        flags_text(m, fl, sizeof fl);
        printf("  #%-3d [%d] off %" PRIu64 " len %s %s thread %" PRId64 ": mapped %.6f s, ", m->id,
               m->fidx, m->off, cli_bytes(m->len, b[0]), fl, m->tid, m->t_map);
        if (m->t_unmap >= 0)
            printf("unmapped %.6f s\n", m->t_unmap);
        else
            printf("live at the end (%s still mapped)\n", cli_bytes(m->left, b[1]));
    }
    int nlock = 0;
    for (int i = 0; i < t->n_ev; i++) {
        const tevent *e = &t->ev[i];
        if (e->type != 'L' && e->type != 'K' && e->type != 'A' && e->type != 'Z') continue;
        if (!nlock++) printf("\nlocks:\n");
        if (e->type == 'A' || e->type == 'Z')
            printf("  %.6f s %s rc %" PRId64 "\n", e->t, e->type == 'A' ? "mlockall" : "munlockall",
                   e->rc);
        else
            printf("  %.6f s %s 0x%" PRIx64 " %s rc %" PRId64 "%s\n", e->t,
                   e->type == 'L' ? "mlock" : "munlock", e->a, cli_bytes(e->b, b[0]), e->rc,
                   e->c ? " (weight mapping)" : "");
    }
    printf("\nreleases: %d", t->releases);
    for (int i = 0, n = 0; i < t->n_ev; i++)
        if (t->ev[i].type == 'R' && n++ < 8)
            printf("%s%.6f s (%s, footprint %s)", n == 1 ? ":\n  " : ",\n  ", t->ev[i].t,
                   t->ev[i].text, cli_bytes(release_footprint(t, t->ev[i].t), b[0]));
    if (t->args.marker)
        printf("; marker %s redirected at %" PRIu64 " call sites", t->args.marker,
               st->marker_patched);
    printf("\n");
    for (int i = 0; i < t->n_ev; i++)
        if (t->ev[i].type == 'W') printf("warning: %s\n", t->ev[i].text);
    uint64_t s0, pk, e0;
    fp_figures(t, &s0, &pk, &e0);
    printf("footprint: first %s, peak %s, last %s (%d samples; the tracer's tables are %s of it at "
           "most)\n",
           cli_bytes(s0, b[0]), cli_bytes(pk, b[1]), cli_bytes(e0, b[2]), t->n_samples,
           cli_bytes(st->tracer_bytes, b[3]));
    if (!t->n_v)
        printf("\nverdict: clean (no rule broken)\n");
    else
        printf("\nverdict: %d rule%s broken\n", t->n_v, t->n_v == 1 ? "" : "s");
    for (int i = 0; i < t->n_v; i++)
        printf("  %s: %s\n", t->v[i].rule, t->v[i].msg);
}

static void report_json(const trace *t) {
    const wmtrace_stats *st = t->st;
    printf("{\"command\":");
    cli_json_cstr(stdout, t->args.cmd[0]);
    printf(",\"pid\":%d,\"exit_status\":%d,\"normal_exit\":%s,\"seconds\":%.6f,\"ok\":%s",
           (int)t->pid, exit_of(t->status), t->exited_normally ? "true" : "false", t->t_end,
           t->n_v ? "false" : "true");
    printf(",\"marker\":");
    if (t->args.marker)
        cli_json_cstr(stdout, t->args.marker);
    else
        printf("null");
    printf(",\"marker_call_sites\":%" PRIu64 ",\"tracer_bytes\":%" PRIu64 ",\"threads\":[",
           st->marker_patched, st->tracer_bytes);
    for (uint64_t i = 0; i < st->n_threads && i < WMTRACE_MAX_THREADS; i++) {
        const wmtrace_thread *th = &st->threads[i];
        printf("%s{\"tid\":%" PRId64 ",\"name\":", i ? "," : "", th->tid);
        cli_json_string(stdout, th->name, strnlen(th->name, sizeof th->name));
        printf(",\"loader\":%s,\"allocs\":%" PRIu64 ",\"alloc_bytes\":%" PRIu64
               ",\"largest\":%" PRIu64 ",\"largest_loading\":%" PRIu64 ",\"held\":[%" PRId64
               ",%" PRId64 ",%" PRId64 ",%" PRId64 "],\"anon_maps\":%" PRIu64
               ",\"anon_largest\":%" PRIu64 ",\"anon_held\":%" PRId64 ",\"weight_read\":%" PRIu64
               "}",
               th->loader ? "true" : "false", th->n_alloc, th->bytes_alloc, th->largest,
               th->largest_loading, th->held[0], th->held[1], th->held[2], th->held[3],
               th->anon_maps, th->anon_largest, th->anon_held, th->weight_read);
    }
    printf("],\"files\":[");
    for (int i = 0; i < t->n_files; i++) {
        int live = 0;
        for (int k = 0; k < t->n_maps; k++)
            if (t->maps[k].fidx == i && t->maps[k].t_unmap < 0) live++;
        printf("%s{\"path\":", i ? "," : "");
        cli_json_cstr(stdout, t->files[i].path);
        printf(",\"kind\":\"%s\",\"size\":%" PRIu64 ",\"opens\":%d,\"mappings\":%d,\"live\":%d}",
               t->files[i].kind, t->files[i].size, t->files[i].opens, t->files[i].maps, live);
    }
    printf("],\"mappings\":[");
    for (int i = 0; i < t->n_maps; i++) {
        const tmap *m = &t->maps[i];
        printf(
            "%s{\"id\":%d,\"file\":%d,\"offset\":%" PRIu64 ",\"length\":%" PRIu64
            ",\"prot\":%d,\"private\":%s,\"writable\":%s,\"privatises_on_read\":%s,\"tid\":%" PRId64
            ",\"mapped\":%.6f,\"unmapped\":",
            i ? "," : "", m->id, m->fidx, m->off, m->len, m->prot,
            m->flags & MAP_PRIVATE ? "true" : "false", m->prot & PROT_WRITE ? "true" : "false",
            private_writable(m) ? "true" : "false", m->tid, m->t_map);
        if (m->t_unmap >= 0)
            printf("%.6f", m->t_unmap);
        else
            printf("null");
        printf(",\"left\":%" PRIu64 "}", m->left);
    }
    printf("],\"locks\":[");
    for (int i = 0, n = 0; i < t->n_ev; i++) {
        const tevent *e = &t->ev[i];
        if (e->type != 'L' && e->type != 'K' && e->type != 'A' && e->type != 'Z') continue;
        printf("%s{\"call\":\"%s\",\"time\":%.6f,\"addr\":%" PRIu64 ",\"length\":%" PRIu64
               ",\"rc\":%" PRId64 ",\"weight\":%s}",
               n++ ? "," : "",
               e->type == 'L'   ? "mlock"
               : e->type == 'K' ? "munlock"
               : e->type == 'A' ? "mlockall"
                                : "munlockall",
               e->t, e->a, e->b, e->rc, e->c ? "true" : "false");
    }
    printf("],\"releases\":[");
    for (int i = 0, n = 0; i < t->n_ev; i++)
        if (t->ev[i].type == 'R') {
            printf("%s{\"time\":%.6f,\"source\":", n++ ? "," : "", t->ev[i].t);
            cli_json_cstr(stdout, t->ev[i].text);
            printf(",\"footprint\":%" PRIu64 "}", release_footprint(t, t->ev[i].t));
        }
    uint64_t s0, pk, e0;
    fp_figures(t, &s0, &pk, &e0);
    printf("],\"footprint\":{\"samples\":%d,\"first\":%" PRIu64 ",\"peak\":%" PRIu64
           ",\"last\":%" PRIu64 "}",
           t->n_samples, s0, pk, e0);
    printf(",\"verdicts\":[");
    for (int i = 0; i < t->n_v; i++) {
        printf("%s{\"rule\":\"%s\",\"message\":", i ? "," : "", t->v[i].rule);
        cli_json_cstr(stdout, t->v[i].msg);
        printf("}");
    }
    printf("]}\n");
}

/* ---- the picture ---- */

/* Layout (docs/TRACE.md): 960 wide; the footprint chart in y 40..240, then one 12-px bar per
 * mapping every 16 px from y 270; the time axis spans x 170..930 (labels left of it). Colours:
 * footprint #1f77b4, a mapping returned in time #2ca02c, one alive after a release #d62728, private
 * writable #ff7f0e, release markers #9467bd. */
#define SVG_W 960
#define SVG_X0 170.0
#define SVG_X1 930.0
#define SVG_BARS_Y 270

static void svg_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

static int write_svg(const trace *t, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "weightmap: %s: %s\n", path, strerror(errno));
        return 1;
    }
    /* The time axis: from the traced process's start (its first X line) to its end. */
    double from = t->t_start, span = t->t_end - from > 0 ? t->t_end - from : 1;
    uint64_t s0, pk, e0;
    fp_figures(t, &s0, &pk, &e0);
    double top = pk ? (double)pk * 1.1 : 1;
    int h = SVG_BARS_Y + 16 * t->n_maps + 30;
    char b[32];
#define X(tt)                                                                                      \
    (SVG_X0 + (SVG_X1 - SVG_X0) * ((tt)-from < 0 ? 0 : (tt)-from > span ? 1 : ((tt)-from) / span))
#define Y(v) (240.0 - 200.0 * (double)(v) / top)
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
            "%d\" "
            "font-family=\"sans-serif\" font-size=\"11\">\n"
            "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
            SVG_W, h, SVG_W, h, SVG_W, h);
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\">weightmap trace: ");
    svg_text(f, t->args.cmd[0]);
    fprintf(f, " (exit %d, %.3f s, %s)</text>\n", exit_of(t->status), t->t_end,
            t->n_v ? "rules broken" : "clean");
    fprintf(f, "<line x1=\"%.1f\" y1=\"240\" x2=\"%.1f\" y2=\"240\" stroke=\"#000000\"/>\n", SVG_X0,
            SVG_X1);
    fprintf(f, "<line x1=\"%.1f\" y1=\"40\" x2=\"%.1f\" y2=\"240\" stroke=\"#000000\"/>\n", SVG_X0,
            SVG_X0);
    fprintf(f, "<text x=\"4\" y=\"%.1f\">%s</text>\n", Y(pk) + 4, cli_bytes(pk, b));
    fprintf(f, "<text x=\"4\" y=\"244\">0</text>\n");
    fprintf(f, "<text x=\"%.1f\" y=\"256\" text-anchor=\"end\">%.3f s</text>\n", SVG_X1, span);
    fprintf(f, "<text x=\"%.1f\" y=\"36\">footprint (anonymous + swap + shmem)</text>\n",
            SVG_X0 + 4);
    if (t->n_samples) {
        fprintf(f, "<polyline class=\"footprint\" fill=\"none\" stroke=\"#1f77b4\" "
                   "stroke-width=\"2\" points=\"");
        for (int i = 0; i < t->n_samples; i++)
            fprintf(f, "%s%.1f,%.1f", i ? " " : "", X(t->samples[i].t), Y(t->samples[i].footprint));
        fprintf(f, "\"/>\n");
    }
    /* Release lines first: the bars and their labels are drawn over them. */
    for (int i = 0; i < t->n_ev; i++)
        if (t->ev[i].type == 'R')
            fprintf(f,
                    "<line class=\"release\" x1=\"%.1f\" y1=\"40\" x2=\"%.1f\" y2=\"%d\" "
                    "stroke=\"#9467bd\" "
                    "stroke-width=\"1\" stroke-dasharray=\"4 3\"/>\n",
                    X(t->ev[i].t), X(t->ev[i].t), h - 20);
    for (int i = 0; i < t->n_maps; i++) {
        const tmap *m = &t->maps[i];
        double x0 = X(m->t_map), x1 = X(m->t_unmap < 0 ? t->t_end : m->t_unmap);
        if (x1 - x0 < 2) x1 = x0 + 2;
        const char *col = private_writable(m) ? "#ff7f0e"
                          : m->after_release  ? "#d62728"
                                              : "#2ca02c";
        int y = SVG_BARS_Y + 16 * i;
        fprintf(
            f,
            "<rect class=\"map\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"12\" fill=\"%s\"/>\n",
            x0, y, x1 - x0, col);
        /* The label stays in the left margin (x < SVG_X0): at most 20 characters of the name. */
        char label[24];
        snprintf(label, sizeof label, "%.20s", fname(t, m->fidx));
        fprintf(f, "<text x=\"4\" y=\"%d\">#%d ", y + 10, m->id);
        svg_text(f, label);
        fprintf(f, "</text>\n");
    }
    fprintf(f,
            "<text x=\"%.1f\" y=\"%d\">bars: weight-file mappings, map to unmap (green returned, "
            "red alive "
            "after a release, orange private writable); dashed: releases</text>\n</svg>\n",
            SVG_X0, h - 6);
#undef X
#undef Y
    if (fclose(f) != 0) {
        fprintf(stderr, "weightmap: %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* ---- the command ---- */

/* The one release of a trace: what reading and judging it acquired (safe on a partial one). */
static void trace_free(trace *t) {
    if (t->st) munmap(t->st, sizeof(wmtrace_stats));
    free(t->maps);
    free(t->ev);
    free(t->samples);
    free(t->v);
    memset(t, 0, sizeof *t);
}

static int traced_run(trace *t, const char *lib, const char *out, int fd);

int cmd_trace(int argc, char **argv) {
    trace t;
    memset(&t, 0, sizeof t);
    int rc = parse_args(argc, argv, &t.args);
    if (rc >= 0) return rc;
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

/* Runs CMD, reads its trace, judges and reports; returns the exit status of `trace`. */
static int traced_run(trace *t, const char *lib, const char *out, int fd) {
    int rc = run_child(t, lib, out);
    if (rc == 0) rc = read_trace(t, fd);
    if (rc != 0) return rc;
    if (t->st->magic != WMTRACE_MAGIC) {
        /* 127: CMD could not be run, and the child said why. */
        if (exit_of(t->status) != 127)
            fprintf(stderr,
                    "weightmap: trace: %s did not load libwmtrace.so (a static binary, or "
                    "setuid?); nothing was traced\n",
                    t->args.cmd[0]);
        return exit_of(t->status) ? exit_of(t->status) : 1;
    }
    judge(t);
    if (t->args.out && !freopen(t->args.out, "w", stdout)) {
        fprintf(stderr, "weightmap: %s: %s\n", t->args.out, strerror(errno));
        return 1;
    }
    if (t->args.json)
        report_json(t);
    else
        report_text(t);
    fflush(stdout);
    for (int i = 0; i < t->n_v; i++)
        fprintf(stderr, "weightmap: trace: rule %s: %s\n", t->v[i].rule, t->v[i].msg);
    int svg_rc = t->args.svg ? write_svg(t, t->args.svg) : 0;
    return t->n_v ? 1 : svg_rc ? 1 : exit_of(t->status);
}
