/*
 * parse.c: reading the trace file of `weightmap trace` (its format: wmtrace.h) into a trace: the
 * stats block mapped, every event line parsed; samples sorted by time, those taken before CMD
 * was exec'd dropped.
 */
#include "tracer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static tmap *find_map(trace *t, int id) {
    for (int i = t->n_maps - 1; i >= 0; i--)
        if (t->maps[i].id == id && t->maps[i].t_unmap < 0) return &t->maps[i];
    return NULL;
}

static int64_t cur_tid; /* the thread of the line being read */

static void add_event(trace *t, double when, char type, uint64_t a, uint64_t b, int64_t rc,
                      uint64_t c, const char *text) {
    GROW(t->ev, t->n_ev, t->cap_ev);
    tevent *e = &t->ev[t->n_ev++];
    memset(e, 0, sizeof *e);
    e->tid = cur_tid;
    e->t = when;
    e->type = type;
    e->a = a;
    e->b = b;
    e->c = c;
    e->rc = rc;
    if (text) snprintf(e->text, sizeof e->text, "%s", text);
}

/* R SOURCE LOAD KEPT SCRATCH: a release returned; its entry was the last r line of this thread. */
static void parse_release(trace *t, double when, int64_t tid, char *p) {
    GROW(t->rel, t->n_rel, t->cap_rel);
    trelease *r = &t->rel[t->n_rel++];
    memset(r, 0, sizeof *r);
    r->t = r->t_begin = when;
    r->tid = tid;
    size_t k = strcspn(p, " ");
    snprintf(r->source, sizeof r->source, "%.*s", (int)k, p);
    p += k;
    r->load = (int)strtol(p, &p, 10);
    r->kept = strtoull(p, &p, 10);
    char *q = p;
    r->scratch_resident = strtoll(p, &q, 10);
    if (q == p) r->scratch_resident = -1;
    p = q;
    while (*p == ' ')
        p++;
    r->by_handle = !strncmp(p, "handle", 6);
    p += strcspn(p, " ");
    r->kept_resident = strtoull(p, &p, 10);
    for (int i = t->n_ev - 1; i >= 0; i--)
        if (t->ev[i].type == 'r' && t->ev[i].tid == tid) {
            r->t_begin = t->ev[i].t;
            break;
        }
    add_event(t, when, 'R', (uint64_t)(t->n_rel - 1), 0, 0, 0, r->source);
}

/* P FOOTPRINT RSS FILE LOCKED MAPS WMAPS MFREE: the figures the process took itself. The first
 * one after a release or at a load's start or end is theirs. */
/* One figure of a P line; "-": not read (its bit set in *unread). */
static uint64_t figure(char **p, unsigned bit, unsigned *unread) {
    while (**p == ' ')
        (*p)++;
    if (**p == '-') {
        (*p)++;
        *unread |= bit;
        return 0;
    }
    char *q = *p;
    uint64_t v = strtoull(q, p, 10);
    if (*p == q) *unread |= bit;
    return v;
}

static void parse_point(trace *t, double when, char *p) {
    tsample s = {.t = when, .inside = true};
    s.footprint = figure(&p, FIG_FOOTPRINT, &s.unread);
    s.rss = figure(&p, FIG_RSS, &s.unread);
    s.file = figure(&p, FIG_FILE, &s.unread);
    s.locked = figure(&p, FIG_LOCKED, &s.unread);
    s.maps = figure(&p, FIG_MAPS, &s.unread);
    unsigned none = 0;
    s.wmaps = figure(&p, 0, &none);
    s.mfree = figure(&p, FIG_MFREE, &s.unread);
    GROW(t->samples, t->n_samples, t->cap_samples);
    t->samples[t->n_samples++] = s;
    const tevent *last = t->n_ev ? &t->ev[t->n_ev - 1] : NULL;
    if (!last) return;
    if (last->type == 'R') t->rel[last->a].at = s;
    if (last->type == 'B' && last->a < WMTRACE_MAX_LOADS) t->loads[last->a].begin = s;
    if (last->type == 'E' && last->a < WMTRACE_MAX_LOADS) t->loads[last->a].end = s;
}

/* M ID FIDX ADDR LEN OFF PROT FLAGS: a mapping of a weight file. */
static void parse_map(trace *t, double when, int64_t tid, char *p) {
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
    char *q = p;
    m->load = (int)strtol(p, &q, 10);
    if (q == p) m->load = -1;
    m->tid = tid;
    m->t_map = when;
    m->t_unmap = -1;
    m->left = m->len;
    if (m->fidx >= 0 && m->fidx < 64) t->files[m->fidx].maps++;
    add_event(t, when, 'M', (uint64_t)(t->n_maps - 1), 0, 0, 0, NULL);
}

/* S NAME TABLE: an object searched for the markers' symbols (once per name). */
static void parse_searched(trace *t, const char *p) {
    if (t->n_objects >= (int)(sizeof t->objects / sizeof t->objects[0])) return;
    size_t k = strcspn(p, " ");
    for (int i = 0; i < t->n_objects; i++)
        if (strlen(t->objects[i].name) == k && !strncmp(t->objects[i].name, p, k)) return;
    searched *o = &t->objects[t->n_objects++];
    snprintf(o->name, sizeof o->name, "%.*s", (int)k, p);
    snprintf(o->table, sizeof o->table, "%s", p[k] ? p + k + 1 : "");
}

static void parse_line(trace *t, char *ln) {
    char *rest;
    uint64_t ns = strtoull(ln, &rest, 10);
    int64_t tid = strtoll(rest, &rest, 10);
    cur_tid = tid;
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
    case 'M': parse_map(t, when, tid, p); break;
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
    case 'r': add_event(t, when, 'r', strtoull(p, &p, 10), 0, 0, 0, NULL); break;
    case 'n': {
        uint64_t spec = strtoull(p, &p, 10);
        add_event(t, when, 'n', spec, strtoull(p, &p, 16), 0, 0, NULL);
        break;
    }
    case 'S': parse_searched(t, p); break;
    case 'R': parse_release(t, when, tid, p); break;
    case 'B':
    case 'E': {
        uint64_t idx = strtoull(p, &p, 10);
        if (idx < WMTRACE_MAX_LOADS) {
            tload *ld = &t->loads[idx];
            if (type == 'B') {
                ld->t_begin = when;
                ld->t_end = -1;
                if ((int)idx >= t->n_loads) t->n_loads = (int)idx + 1;
            } else {
                uint64_t end_ns = strtoull(p, &p, 10); /* a pause before it, if any */
                ld->t_end = end_ns >= t->t0_ns && end_ns ? (double)(end_ns - t->t0_ns) / 1e9 : when;
            }
        }
        add_event(t, when, type, idx, 0, 0, 0, NULL);
        break;
    }
    case 'P': parse_point(t, when, p); break;
    case 'Q': t->exited_normally = true; break;
    case 'W': add_event(t, when, 'W', 0, 0, 0, 0, p); break;
    default: break;
    }
}

static int cmp_sample(const void *a, const void *b) {
    double x = ((const tsample *)a)->t, y = ((const tsample *)b)->t;
    return x < y ? -1 : x > y;
}

int trace_read(trace *t, int fd) {
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
    if (t->n_samples) qsort(t->samples, (size_t)t->n_samples, sizeof *t->samples, cmp_sample);
    return 0;
}
