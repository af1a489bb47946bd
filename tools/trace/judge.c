/*
 * judge.c: what a trace says. Facts (what each load took from malloc and kept, where each
 * release ran) and verdicts (the rules of docs/TRACE.md: released, loads, private, scratch,
 * cycle), each placed at its time; and the helpers the reports share.
 */
#include "tracer.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define MIB ((uint64_t)1 << 20)

int trace_exit_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

const char *trace_fname(const trace *t, int fidx) {
    if (fidx < 0 || fidx >= t->n_files || !t->files[fidx].path[0]) return "?";
    const char *s = strrchr(t->files[fidx].path, '/');
    return s ? s + 1 : t->files[fidx].path;
}

bool trace_private_writable(const tmap *m) {
    return (m->flags & MAP_PRIVATE) && (m->prot & PROT_WRITE);
}

void trace_fp_figures(const trace *t, uint64_t *start, uint64_t *peak, uint64_t *end) {
    *start = *peak = *end = 0;
    for (int i = 0; i < t->n_samples; i++) {
        if (i == 0) *start = t->samples[i].footprint;
        if (t->samples[i].footprint > *peak) *peak = t->samples[i].footprint;
        *end = t->samples[i].footprint;
    }
}

const wmtrace_load *trace_load_stats(const trace *t, int load) {
    if (load < 0 || load >= t->n_loads || (uint64_t)load >= t->st->n_loads) return NULL;
    return &t->st->loads[load];
}

const char *trace_thread_name(const trace *t, int64_t tid) {
    for (uint64_t i = 0; i < t->st->n_threads && i < WMTRACE_MAX_THREADS; i++)
        if (t->st->threads[i].tid == tid) return t->st->threads[i].name;
    return "?";
}

static void add(trace *t, const char *rule, double when, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(trace *t, const char *rule, double when, const char *fmt, ...) {
    GROW(t->v, t->n_v, t->cap_v);
    verdict *v = &t->v[t->n_v++];
    v->rule = rule;
    v->t = when;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof v->msg, fmt, ap);
    va_end(ap);
    if (rule) t->broken++;
}

/* released: a mapping of a weight file alive after a release that came after it was mapped. */
static void rule_released(trace *t) {
    char b[32];
    for (int i = 0; i < t->n_maps; i++) {
        tmap *m = &t->maps[i];
        double until = m->t_unmap < 0 ? 1e300 : m->t_unmap;
        int r = 0;
        while (r < t->n_rel && !(t->rel[r].t >= m->t_map && t->rel[r].t < until))
            r++;
        if (r < t->n_rel) {
            add(t, "released", t->rel[r].t,
                "release %d at %.6f s (%s): mapping #%d of %s (%s at offset %" PRIu64
                ") still mapped",
                r + 1, t->rel[r].t, t->rel[r].source, m->id, trace_fname(t, m->fidx),
                cli_bytes(m->len, b), m->off);
            m->after_release = r + 1;
        } else if (m->t_unmap < 0) {
            add(t, "released", t->t_end,
                "mapping #%d of %s (%s at offset %" PRIu64 ") still mapped at the end of the "
                "process",
                m->id, trace_fname(t, m->fidx), cli_bytes(m->len, b), m->off);
            m->after_release = -1;
        }
    }
}

/* loads: more live mappings of the same bytes than opens of the file since the last release. */
static void rule_loads(trace *t) {
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
            add(t, "loads", now,
                "%d live mappings of the same bytes of %s at %.6f s after %d load%s since the "
                "last release",
                depth, trace_fname(t, m->fidx), now, opens, opens == 1 ? "" : "s");
            return;
        }
    }
}

static void rule_private(trace *t) {
    char b[32];
    for (int i = 0; i < t->n_maps; i++)
        if (trace_private_writable(&t->maps[i]))
            add(t, "private", t->maps[i].t_map,
                "mapping #%d of %s is MAP_PRIVATE with PROT_WRITE: privatises on read (every "
                "page it touches can become a private copy; %s charged at map time)",
                t->maps[i].id, trace_fname(t, t->maps[i].fidx), cli_bytes(t->maps[i].len, b));
}

static uint64_t pos_delta(uint64_t after, uint64_t before) {
    return after > before ? after - before : 0;
}

/* scratch: what a load freed before it ended, still in the footprint after its release: at
 * most the scratch, the footprint's growth since the load began, the growth of the free memory
 * malloc holds, and the bytes of the scratch blocks' own pages still resident outside live big
 * blocks (all four must show it; the last where the process could tell it). */
static void rule_scratch(trace *t) {
    char b[6][32];
    for (int r = 0; r < t->n_rel; r++) {
        const trelease *rel = &t->rel[r];
        const wmtrace_load *ld = trace_load_stats(t, rel->load);
        if (!ld || !ld->scratch) continue;
        const tload *tl = &t->loads[rel->load];
        uint64_t fp = pos_delta(rel->at.footprint, tl->begin.footprint);
        uint64_t mf = pos_delta(rel->at.mfree, tl->begin.mfree);
        uint64_t kept = ld->scratch < fp ? ld->scratch : fp;
        if (mf < kept) kept = mf;
        bool known = rel->scratch_resident >= 0;
        if (known && (uint64_t)rel->scratch_resident < kept) kept = (uint64_t)rel->scratch_resident;
        if (kept < MIB) continue;
        add(t, "scratch", rel->t,
            "release %d at %.6f s: load %d freed %s of malloc scratch before it ended (%" PRIu64
            " blocks, largest %s), and after the release malloc still holds %s more free memory, "
            "the footprint is %s above the load's start%s%s%s: freed scratch stayed in the "
            "footprint (up to %s)",
            r + 1, rel->t, rel->load + 1, cli_bytes(ld->scratch, b[0]), ld->scratch_blocks,
            cli_bytes(ld->scratch_largest, b[1]), cli_bytes(mf, b[2]), cli_bytes(fp, b[3]),
            known ? " and " : "", known ? cli_bytes((uint64_t)rel->scratch_resident, b[5]) : "",
            known ? " of the scratch blocks' pages are still resident" : "", cli_bytes(kept, b[4]));
    }
}

/* cycle: a figure that grows at every release: a leak per cycle. Mappings over three releases
 * at least; bytes over four (an allocator's cache fills over the first cycles). */
static void rule_cycle(trace *t) {
    static const struct {
        const char *what;
        size_t off;
        uint64_t step; /* the least growth that counts */
        int releases;  /* the least releases */
    } figs[] = {
        {"mappings", offsetof(tsample, maps), 1, 3},
        {"weight-file mappings", offsetof(tsample, wmaps), 1, 3},
        {"footprint", offsetof(tsample, footprint), 1 << 20, 4},
        {"locked bytes", offsetof(tsample, locked), 4096, 4},
    };
    char b[3][32];
    for (size_t f = 0; f < sizeof figs / sizeof *figs; f++) {
        if (t->n_rel < figs[f].releases) continue;
        uint64_t first = 0, last = 0, least = UINT64_MAX;
        for (int r = 0; r < t->n_rel; r++) {
            uint64_t v;
            memcpy(&v, (const char *)&t->rel[r].at + figs[f].off, sizeof v);
            if (r && (v < last + figs[f].step)) least = 0;
            if (r && v > last && v - last < least) least = v - last;
            if (!r) first = v;
            last = v;
        }
        if (!least || least == UINT64_MAX) continue;
        bool bytes = figs[f].step > 1;
        if (bytes)
            add(t, "cycle", t->rel[t->n_rel - 1].t,
                "every cycle adds %s or more of %s (after release 1: %s; after release %d: %s)",
                cli_bytes(least, b[0]), figs[f].what, cli_bytes(first, b[1]), t->n_rel,
                cli_bytes(last, b[2]));
        else
            add(t, "cycle", t->rel[t->n_rel - 1].t,
                "every cycle adds %" PRIu64 " or more %s (after release 1: %" PRIu64
                "; after release %d: %" PRIu64 ")",
                least, figs[f].what, first, t->n_rel, last);
    }
}

/* Facts: what each load kept of its malloc blocks (weights in malloc memory, when a runtime reads
 * them into buffers), and each release that ran on a thread other than its load's. */
static void facts(trace *t) {
    char b[4][32];
    for (int i = 0; i < t->n_loads; i++) {
        const wmtrace_load *ld = trace_load_stats(t, i);
        if (!ld || !ld->end_ns || ld->kept_at_end < WMTRACE_BIG) continue;
        add(t, NULL, t->loads[i].t_end,
            "load %d (thread %" PRId64 " %.16s): %s of malloc memory taken while loading and held "
            "past its end (weights in malloc memory, or what the runtime built: largest block "
            "%s); %s freed by a release, %s still held at the end",
            i + 1, ld->tid, trace_thread_name(t, ld->tid), cli_bytes(ld->kept_at_end, b[0]),
            cli_bytes(ld->kept_largest, b[1]), cli_bytes(ld->freed_in_release, b[2]),
            cli_bytes(ld->kept, b[3]));
    }
    for (int r = 0; r < t->n_rel; r++) {
        const trelease *rel = &t->rel[r];
        const wmtrace_load *ld = trace_load_stats(t, rel->load);
        if (!ld || ld->tid == rel->tid) continue;
        const tload *tl = &t->loads[rel->load];
        add(t, NULL, rel->t,
            "release %d ran on thread %" PRId64 " (%.16s), load %d on thread %" PRId64
            " (%.16s): %s of that load's malloc memory was freed by a release%s; after it malloc "
            "holds %s free (%s%s since the load began)",
            r + 1, rel->tid, trace_thread_name(t, rel->tid), rel->load + 1, ld->tid,
            trace_thread_name(t, ld->tid), cli_bytes(ld->freed_in_release, b[0]),
            ld->release_tid == rel->tid ? " on that thread" : "", cli_bytes(rel->at.mfree, b[1]),
            rel->at.mfree >= tl->begin.mfree ? "+" : "-",
            cli_bytes(rel->at.mfree >= tl->begin.mfree ? rel->at.mfree - tl->begin.mfree
                                                       : tl->begin.mfree - rel->at.mfree,
                      b[2]));
    }
}

static int by_time(const void *a, const void *b) {
    double x = ((const verdict *)a)->t, y = ((const verdict *)b)->t;
    return x < y ? -1 : x > y;
}

void trace_judge(trace *t) {
    rule_released(t);
    rule_loads(t);
    rule_private(t);
    rule_scratch(t);
    rule_cycle(t);
    facts(t);
    /* Broken rules first, each group in time order. */
    if (!t->n_v) return;
    int k = 0;
    for (int i = 0; i < t->n_v; i++)
        if (t->v[i].rule) {
            verdict v = t->v[i];
            memmove(&t->v[k + 1], &t->v[k], (size_t)(i - k) * sizeof v);
            t->v[k++] = v;
        }
    qsort(t->v, (size_t)k, sizeof *t->v, by_time);
    qsort(t->v + k, (size_t)(t->n_v - k), sizeof *t->v, by_time);
}
