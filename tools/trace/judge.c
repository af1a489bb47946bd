/*
 * judge.c: what a trace says. Facts (what each load took from malloc and kept, as address space
 * and touched; where each release ran; release calls for no load's handle; releases paired by
 * time only; the allocator's share of the footprint's growth) and verdicts (the rules of
 * docs/TRACE.md: released, loads, private, scratch, cycle), each placed at its time; each rule's
 * state (broken, judged and held, or not judged and why) and the outcome; and the helpers the
 * reports share.
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
    bool first = true;
    for (int i = 0; i < t->n_samples; i++) {
        if (t->samples[i].inside && (t->samples[i].unread & FIG_FOOTPRINT)) continue;
        if (first) *start = t->samples[i].footprint;
        first = false;
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

/* released: a mapping of a weight file alive after a release that came after it was mapped. A
 * release paired with its load by handle judges that load's mappings only (a runtime that keeps
 * a second model keeps its mappings); one paired by time judges every mapping made before it. */
static void rule_released(trace *t) {
    char b[32];
    for (int i = 0; i < t->n_maps; i++) {
        tmap *m = &t->maps[i];
        double until = m->t_unmap < 0 ? 1e300 : m->t_unmap;
        int r = 0;
        while (r < t->n_rel && !(t->rel[r].t >= m->t_map && t->rel[r].t < until &&
                                 (!t->rel[r].by_handle || t->rel[r].load == m->load)))
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

/* Load `load` was begun, has a handle, and no release received it before `now`. */
static bool live_by_handle(const trace *t, int load, double now) {
    const wmtrace_load *ld = trace_load_stats(t, load);
    if (!ld || !ld->handle) return false;
    for (int r = 0; r < t->n_rel; r++)
        if (t->rel[r].by_handle && t->rel[r].load == load && t->rel[r].t < now) return false;
    return true;
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
            if (m->load >= 0 && o->load >= 0 && o->load != m->load &&
                live_by_handle(t, o->load, now))
                continue; /* another model the runtime keeps, its release not come yet */
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
        if (!fig_read(&rel->at, FIG_FOOTPRINT | FIG_MFREE) ||
            !fig_read(&tl->begin, FIG_FOOTPRINT | FIG_MFREE))
            continue; /* not judged there (judge_states says so) */
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
 * at least; bytes over four (an allocator's cache fills over the first cycles). A footprint that
 * grows only by malloc's free memory (live memory, the footprint less it, does not grow at every
 * release) is the allocator's, a fact (facts), not this rule. With fewer releases than a figure
 * needs, one that did not grow at some release holds; one that grew at each is not judged. */
typedef struct cycle_fig {
    const char *what;
    size_t off;
    unsigned bit;  /* its FIG_ bit */
    uint64_t step; /* the least growth that counts */
    int releases;  /* the least releases */
} cycle_fig;

/* The figure's value at release r; false where it was not read. live: the footprint less
 * malloc's free memory, plus 2^62 (malloc's free memory can be more than the footprint: its
 * heaps' free tops, never touched; only the steps matter). */
static bool fig_at(const trace *t, int r, const cycle_fig *f, bool live, uint64_t *v) {
    const tsample *a = &t->rel[r].at;
    if (!fig_read(a, f->bit) || (live && !fig_read(a, FIG_MFREE))) return false;
    memcpy(v, (const char *)a + f->off, sizeof *v);
    if (live) *v = *v + ((uint64_t)1 << 62) - a->mfree; /* signed, shifted: steps compare */
    return true;
}

/* Over the releases where it was read: n of them, the first and last values, the least growth
 * from one to the next (0: some step grew less than f->step). */
static int fig_series(const trace *t, const cycle_fig *f, bool live, uint64_t *first,
                      uint64_t *last, uint64_t *least) {
    int n = 0;
    *least = UINT64_MAX;
    for (int r = 0; r < t->n_rel; r++) {
        uint64_t v;
        if (!fig_at(t, r, f, live, &v)) continue;
        if (n && v < *last + f->step) *least = 0;
        if (n && v > *last && v - *last < *least) *least = v - *last;
        if (!n) *first = v;
        *last = v;
        n++;
    }
    return n;
}

static void cycle_line(trace *t, const cycle_fig *f, uint64_t least, uint64_t first,
                       uint64_t last) {
    char b[3][32];
    if (f->step > 1)
        add(t, "cycle", t->rel[t->n_rel - 1].t,
            "every cycle adds %s or more of %s (after release 1: %s; after release %d: %s)",
            cli_bytes(least, b[0]), f->what, cli_bytes(first, b[1]), t->n_rel,
            cli_bytes(last, b[2]));
    else
        add(t, "cycle", t->rel[t->n_rel - 1].t,
            "every cycle adds %" PRIu64 " or more %s (after release 1: %" PRIu64
            "; after release %d: %" PRIu64 ")",
            least, f->what, first, t->n_rel, last);
}

static void rule_cycle(trace *t) {
    static const cycle_fig figs[] = {
        {"mappings", offsetof(tsample, maps), FIG_MAPS, 1, 3},
        {"weight-file mappings", offsetof(tsample, wmaps), 0, 1, 3},
        {"footprint", offsetof(tsample, footprint), FIG_FOOTPRINT, 1 << 20, 4},
        {"locked bytes", offsetof(tsample, locked), FIG_LOCKED, 4096, 4},
    };
    rule_state *st = &t->rules[4];
    st->judged = true;
    bool allocator_growth = false;
    size_t n = 0;
    for (size_t k = 0; k < sizeof figs / sizeof *figs; k++) {
        const cycle_fig *f = &figs[k];
        uint64_t first = 0, last = 0, least = 0, lf = 0, ll = 0, lleast = 0;
        int seen = fig_series(t, f, false, &first, &last, &least);
        bool grew = seen >= 2 && least && least != UINT64_MAX;
        /* the footprint's growth is the allocator's unless live memory grew at each release too
         * (then judged however few the releases: its steps say it) */
        bool allocators = grew && f->bit == FIG_FOOTPRINT &&
                          fig_series(t, f, true, &lf, &ll, &lleast) == seen &&
                          !(lleast && lleast != UINT64_MAX);
        if (allocators) {
            allocator_growth = true;
        } else if (grew && seen >= f->releases) {
            cycle_line(t, f, least, first, last);
        } else if (seen < 2 || grew) {
            char b[2][32];
            st->judged = false;
            if (seen < 2)
                n += (size_t)snprintf(st->how + n, sizeof st->how - n, "%s%s: read at %d release%s",
                                      n ? "; " : "", f->what, seen, seen == 1 ? "" : "s");
            else if (f->step > 1)
                n += (size_t)snprintf(st->how + n, sizeof st->how - n,
                                      "%s%s grew at each of %d releases (%s to %s), %d needed",
                                      n ? "; " : "", f->what, seen, cli_bytes(first, b[0]),
                                      cli_bytes(last, b[1]), f->releases);
            else
                n += (size_t)snprintf(st->how + n, sizeof st->how - n,
                                      "%s%s grew at each of %d releases (%" PRIu64 " to %" PRIu64
                                      "), %d needed",
                                      n ? "; " : "", f->what, seen, first, last, f->releases);
            if (n >= sizeof st->how) n = sizeof st->how - 1;
        }
    }
    if (st->judged)
        snprintf(st->how, sizeof st->how, "at %d releases: %s", t->n_rel,
                 allocator_growth ? "the footprint grew at every release, but live memory (the "
                                    "footprint less malloc's free memory) did not: the allocator's "
                                    "growth (facts); no other figure grew at every release"
                                  : "no figure grew at every release");
}

/* Facts: what each load kept of its malloc blocks (weights in malloc memory, when a runtime reads
 * them into buffers), and each release that ran on a thread other than its load's. */
static void facts(trace *t) {
    char b[4][32];
    for (int i = 0; i < t->n_loads; i++) {
        const wmtrace_load *ld = trace_load_stats(t, i);
        if (!ld || !ld->end_ns || ld->kept_at_end < WMTRACE_BIG) continue;
        char res[32];
        add(t, NULL, t->loads[i].t_end,
            "load %d (thread %" PRId64 " %.16s): %s of malloc address space taken while loading "
            "and held past its end, %s of it touched (resident at the load's end; weights in "
            "malloc memory, or what the runtime built: largest block %s); %s freed by a "
            "release, %s still held at the end",
            i + 1, ld->tid, trace_thread_name(t, ld->tid), cli_bytes(ld->kept_at_end, b[0]),
            cli_bytes(ld->kept_resident, res), cli_bytes(ld->kept_largest, b[1]),
            cli_bytes(ld->freed_in_release, b[2]), cli_bytes(ld->kept, b[3]));
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

/* Release calls for no live load's handle (NULL, another object the runtime keeps): named, not
 * counted as releases; releases paired with their load by time only, once. */
static void facts_pairing(trace *t) {
    for (uint64_t k = 0; k < t->st->n_specs && k < WMTRACE_MAX_SPECS; k++) {
        const wmtrace_spec *s = &t->st->specs[k];
        if (!s->unpaired) continue;
        int nulls = 0;
        double when = t->t_end;
        for (int i = 0; i < t->n_ev; i++)
            if (t->ev[i].type == 'n' && t->ev[i].a == k) {
                nulls += t->ev[i].b == 0;
                if (when == t->t_end) when = t->ev[i].t;
            }
        add(t, NULL, when,
            "release marker %s returned %" PRIu64 " time%s for no live load's handle (%d of them "
            "with NULL): not counted as releases",
            s->text, s->unpaired, s->unpaired == 1 ? "" : "s", nulls);
    }
    int by_time = 0, after_marker_load = 0;
    for (int r = 0; r < t->n_rel; r++) {
        if (t->rel[r].by_handle) continue;
        by_time++;
        const wmtrace_load *ld = trace_load_stats(t, t->rel[r].load);
        after_marker_load += ld && ld->spec >= 0;
    }
    if (by_time && after_marker_load)
        add(t, NULL, t->rel[0].t,
            "%d release%s paired with the last load begun before %s by time only (a handle pairs "
            "them: =ret on the load marker, =arg1 on the release marker, docs/TRACE.md)",
            by_time, by_time == 1 ? "" : "s", by_time == 1 ? "it" : "each");
}

/* The allocator's share: what malloc holds free after the last release, apart from live memory,
 * and what returns it. */
static void facts_allocator(trace *t) {
    char b[7][32];
    int first = -1, last = -1;
    for (int r = 0; r < t->n_rel; r++)
        if (fig_read(&t->rel[r].at, FIG_FOOTPRINT | FIG_MFREE)) {
            if (first < 0) first = r;
            last = r;
        }
    if (last <= first) return;
    const tsample *a = &t->rel[first].at, *z = &t->rel[last].at;
    if (z->footprint < a->footprint + MIB || z->mfree < a->mfree + MIB) return;
    uint64_t fp = z->footprint - a->footprint, mf = z->mfree - a->mfree;
    add(t, NULL, t->rel[last].t,
        "from release %d to release %d the footprint grew %s (%s to %s) and malloc's free memory "
        "%s (%s to %s): %s the allocator's, not live memory. glibc keeps freed blocks in its "
        "heap (its mmap threshold rises to a freed mapped block's size, up to 32 MiB, so later "
        "big blocks come from the heap); malloc_trim(0) in the program would return up to %s "
        "(the free memory's whole pages, what of it is resident), and mallopt(M_MMAP_THRESHOLD, "
        "131072) or GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072 keeps blocks of 128 KiB "
        "and more out of the heap",
        first + 1, last + 1, cli_bytes(fp, b[0]), cli_bytes(a->footprint, b[1]),
        cli_bytes(z->footprint, b[2]), cli_bytes(mf, b[3]), cli_bytes(a->mfree, b[4]),
        cli_bytes(z->mfree, b[5]), mf + MIB >= fp ? "that growth is" : "part of that growth is",
        cli_bytes(z->mfree, b[6]));
}

/* What the user's markers matched: one that matched nothing leaves its loads or releases
 * unseen. */
static int unmatched_markers(const trace *t) {
    int n = 0;
    for (uint64_t k = 0; k < t->st->n_specs && k < WMTRACE_MAX_SPECS; k++)
        n += !t->st->specs[k].known && !t->st->specs[k].sites;
    return n;
}

static void state(trace *t, int k, bool judged, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void state(trace *t, int k, bool judged, const char *fmt, ...) {
    rule_state *st = &t->rules[k];
    st->judged = judged;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->how, sizeof st->how, fmt, ap);
    va_end(ap);
}

/* Each rule: broken (its lines), judged and held (on what), or not judged (why). */
static void judge_states(trace *t) {
    static const char *names[N_RULES] = {"released", "loads", "private", "scratch", "cycle"};
    const char *none = "no release seen";
    bool files = t->n_files > 0;
    int paired = 0, read = 0;
    for (int r = 0; r < t->n_rel; r++) {
        const trelease *rel = &t->rel[r];
        if (rel->load < 0) continue;
        paired++;
        read += fig_read(&rel->at, FIG_FOOTPRINT | FIG_MFREE) &&
                fig_read(&t->loads[rel->load].begin, FIG_FOOTPRINT | FIG_MFREE);
    }
    const char *nofile = "no weight file touched (a file the tracer cannot recognise is named "
                         "with --file)";
    if (!files)
        state(t, 0, false, "%s", nofile);
    else if (!t->n_maps)
        state(t, 0, true, "no weight file was mapped");
    else if (!t->n_rel)
        state(t, 0, false, "%s; only the end of the process was looked at", none);
    else
        state(t, 0, true, "%d mapping%s at %d release%s and the end of the process", t->n_maps,
              t->n_maps == 1 ? "" : "s", t->n_rel, t->n_rel == 1 ? "" : "s");
    if (!files)
        state(t, 1, false, "%s", nofile);
    else if (!t->n_maps)
        state(t, 1, true, "no weight file was mapped");
    else if (!t->n_rel)
        state(t, 1, false, "%s: every open so far counts as one load", none);
    else
        state(t, 1, true, "%d mapping%s", t->n_maps, t->n_maps == 1 ? "" : "s");
    if (!files)
        state(t, 2, false, "%s", nofile);
    else
        state(t, 2, true, "%d mapping%s", t->n_maps, t->n_maps == 1 ? "" : "s");
    if (!t->n_rel)
        state(t, 3, false, "%s", none);
    else if (!paired)
        state(t, 3, false, "no release followed a load (%s)",
              files ? "no load seen before a release" : nofile);
    else if (read < paired)
        state(t, 3, read > 0,
              "%d of %d releases after a load (at the others a figure was not "
              "read: the process tearing down?)",
              read, paired);
    else
        state(t, 3, true, "%d release%s after a load", read, read == 1 ? "" : "s");
    if (!t->n_rel) state(t, 4, false, "%s", none);
    t->not_judged = unmatched_markers(t);
    for (int k = 0; k < N_RULES; k++) {
        t->rules[k].rule = names[k];
        t->rules[k].broken = 0;
        for (int i = 0; i < t->n_v; i++)
            t->rules[k].broken += t->v[i].rule && !strcmp(t->v[i].rule, names[k]);
        t->not_judged += !t->rules[k].broken && !t->rules[k].judged;
    }
}

const char *trace_no_release_hint(const trace *t) {
    static char hint[300];
    snprintf(hint, sizeof hint,
             "no release seen: mark the runtime's release function with --cycles-marker SPEC, or "
             "have the program raise the release signal, number %d, given to it in "
             "$WMTRACE_SIGNAL (docs/TRACE.md)",
             t->args.release_signal);
    return hint;
}

const char *trace_outcome(const trace *t) {
    return t->broken ? "broken" : t->not_judged ? "not judged" : "clean";
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
    facts_pairing(t);
    facts_allocator(t);
    judge_states(t);
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
