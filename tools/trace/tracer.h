/*
 * tracer.h: what the files of `weightmap trace` (the command) share: the trace as read back.
 *
 *   cmd.c     arguments, finding libwmtrace.so, running CMD (footprint sampled from outside),
 *             cmd_trace (the entry the command table calls)
 *   parse.c   reading the trace file (wmtrace.h) into a trace
 *   judge.c   the releases' figures, the facts, and the verdicts
 *   report.c  the text and JSON reports
 *   svg.c     the picture
 */
#ifndef WM_TRACE_TRACER_H
#define WM_TRACE_TRACER_H

#include "cli.h"
#include "wmtrace.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#define MAX_NAMED 64
#define MAX_MARKERS 16 /* the user's */

typedef struct trace_args {
    const char *files[MAX_NAMED];
    int n_files;
    const char *markers[MAX_MARKERS]; /* "L SPEC" / "R SPEC" */
    int n_markers;
    bool json;
    bool strict;        /* exit 3 when anything is not judged */
    bool no_known;      /* no known runtime's markers */
    int release_signal; /* its number */
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
    int after_release; /* the first release it outlived (1-based), 0 none; -1: the end */
    int load;          /* the load under way when it was mapped, -1 none */
} tmap;

typedef struct tevent {
    double t;
    char type;
    int64_t tid;
    uint64_t a, b, c;
    int64_t rc;
    char text[256]; /* a warning whole (it names the marker and why) */
} tevent;

/* The process's figures at a point (P lines; outside samples have footprint and rss only). */
typedef struct tsample {
    double t;
    uint64_t footprint, rss, file, locked, maps, wmaps, mfree;
    bool inside;     /* a P line: the process's own figures (none after a release: not read) */
    unsigned unread; /* the FIG_ bits of the figures the process could not read */
} tsample;
enum {
    FIG_FOOTPRINT = 1,
    FIG_RSS = 2,
    FIG_FILE = 4,
    FIG_LOCKED = 8,
    FIG_MAPS = 16,
    FIG_MFREE = 32
};
/* The figure (FIG_ bit) was read at s. */
static inline bool fig_read(const tsample *s, unsigned bit) {
    return s->inside && !(s->unread & bit);
}

typedef struct trelease {
    double t, t_begin; /* its return; its entry (a release marker), else t */
    int64_t tid;
    char source[96];
    int load;                 /* the load it released, -1 none */
    bool by_handle;           /* paired with that load by its handle, else by time */
    uint64_t kept;            /* that load's malloc blocks still held after it */
    uint64_t kept_resident;   /* of them, resident (whole pages) */
    int64_t scratch_resident; /* of that load's scratch, bytes resident outside live big blocks
                                 after it (whole pages); -1 not known */
    tsample at;               /* the figures right after it */
} trelease;

typedef struct tload {
    double t_begin, t_end; /* t_end < 0: not ended */
    tsample begin, end;
} tload;

/* A rule's outcome: broken (lines in the verdicts), judged and held, or not judged (why). */
#define N_RULES 5
typedef struct rule_state {
    const char *rule;
    int broken;
    bool judged;
    char how[400]; /* judged: on what; not judged: why */
} rule_state;

typedef struct searched {
    char name[64];
    char table[8];
} searched;

typedef struct verdict {
    const char *rule; /* NULL: a fact, not a broken rule */
    double t;         /* where the picture places it */
    char msg[1024];
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
    tevent *ev; /* opens, maps, locks, releases, warnings */
    int n_ev, cap_ev;
    tsample *samples;
    int n_samples, cap_samples;
    trelease *rel;
    int n_rel, cap_rel;
    tload loads[WMTRACE_MAX_LOADS];
    int n_loads;
    verdict *v;
    int n_v, cap_v;
    int broken; /* verdicts with a rule */
    rule_state rules[N_RULES];
    int not_judged;        /* rules not judged, and the user's markers that matched nothing */
    searched objects[256]; /* the objects searched for the markers' symbols */
    int n_objects;
} trace;

/* The outcome: "broken", "not judged" or "clean". */
const char *trace_outcome(const trace *t);
/* What to do when no release was seen (one line). */
const char *trace_no_release_hint(const trace *t);

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

int trace_read(trace *t, int fd);
void trace_judge(trace *t);
void trace_report_text(const trace *t);
void trace_report_json(const trace *t);
int trace_write_svg(const trace *t, const char *path);

/* Helpers the reports share (judge.c). */
int trace_exit_of(int status);
const char *trace_fname(const trace *t, int fidx);
bool trace_private_writable(const tmap *m);
void trace_fp_figures(const trace *t, uint64_t *start, uint64_t *peak, uint64_t *end);
const wmtrace_load *trace_load_stats(const trace *t, int load);
const char *trace_thread_name(const trace *t, int64_t tid);

#endif
