/*
 * pool.c: models under a budget (include/weightmap.h, "Budgets"): what the system has
 * (wm_mem_available_get), and the pool: models keyed by (path, mode, lock, backend, device),
 * loaded when asked for after evicting the least recently used idle ones until the load's cost
 * fits, each eviction proven by the ledger before the next load starts.
 *
 * Objects of other libraries (wm_pool_get_object: a bridge's models) are entries too: keyed by
 * their owner and key bytes, loaded, costed and released through the owner's functions, proven by
 * the ledger and by the owner's own counts (wm_pool_counts), each falling by what it rose by across
 * the object's load.
 *
 * Sections: what the system has; entries; proofs; evicting; get and put; objects; stats and close.
 *
 * Why the pool's lock is held across a load: the proof that an eviction returned every byte is
 * the ledger's (global) currents falling by what they rose by when that model came; with the
 * pool's own loads serialised, nothing of the pool's can move the ledger in between. Loads by
 * others in the process can, and then an eviction counts as unproven rather than proven.
 */
#include "backend/backend.h"

#include <stdio.h>
#include <string.h>

/* ---- what the system has ---- */

wm_status wm_mem_available_get(wm_backend_kind backend, int device, wm_mem_available *out,
                               wm_error *err) {
    if (!out) return wm__err(err, WM_EINVAL, 0, "wm_mem_available_get: NULL out");
    const wm__backend *be;
    wm_status st = wm__backend_get(backend, "wm_mem_available_get", &be, err);
    if (st) return st;
    wm_os_mem_room room;
    wm_os_why why;
    int e = wm__os_mem_room(&room, &why);
    if (e)
        return wm__err(err, wm__status_io(e), e, "%s: %s", why.source,
                       why.detail ? why.detail : wm__errno_text(e));
    wm_mem_available a = {.size = sizeof a,
                          .mem_available = room.available,
                          .cgroup_limit = room.cgroup_limit,
                          .cgroup_current = room.cgroup_current,
                          .device_free = UINT64_MAX,
                          .device_total = UINT64_MAX};
    a.host = a.mem_available;
    if (a.cgroup_limit != UINT64_MAX) {
        uint64_t r = a.cgroup_limit > a.cgroup_current ? a.cgroup_limit - a.cgroup_current : 0;
        if (r < a.host) a.host = r;
    }
    if (be->mem_info) {
        st = be->mem_info(device, &a.device_free, &a.device_total, err);
        if (st) return st;
    }
    wm__struct_out(out, &a, sizeof a, sizeof a);
    return WM_OK;
}

/* ---- entries ---- */

/* Host categories: what a budget counts (pinned and locked are parts of them). */
static const wm_ledger_category host_cats[] = {WM_LEDGER_HEAP, WM_LEDGER_SCRATCH,
                                               WM_LEDGER_MAP_SHARED, WM_LEDGER_MAP_PRIVATE};

typedef struct entry {
    struct entry *next;
    char *path;
    wm_mode mode;
    wm_lock lock;
    wm_backend_kind backend;
    int device;
    wm_model *model; /* NULL: asleep (a mapped CPU model whose pages the page cache keeps) */
    wm_os_stat st;   /* the file when its model came */
    unsigned uses;
    bool stale;                            /* the file changed: released at its last put */
    uint64_t last;                         /* the pool's tick at the last get or put */
    uint64_t came[WM_LEDGER_COUNT];        /* what the ledger rose by when the model came */
    uint64_t came_dev[WM_LEDGER_DEVICES];  /* and per device */
    uint64_t held;                         /* sum of came over host_cats */
    uint64_t slept_dev[WM_LEDGER_DEVICES]; /* asleep in host memory: what it held per device */
    /* an owner's object (wm_pool_get_object) in place of a model */
    void *object;
    wm_pool_owner owner;
    unsigned char *key;
    size_t key_len;
    uint64_t came_own; /* what the owner's host count rose by when the object came (in held);
                          its device counts' rise is in came_dev, beside the ledger's */
} entry;

struct wm_pool {
    wm_os_mutex mu;
    wm_pool_options o;
    entry *head;
    uint64_t tick;
    wm_pool_stats st;
    /* The last eviction or sleep the ledger did not prove: what was wanted back and what came */
    uint64_t short_want, short_got;
};

static void entry_free(entry *e) {
    if (!e) return;
    wm__free(e->key);
    wm__free(e->path);
    wm__free(e);
}

/* Holds a model or an object (an asleep mapped model's entry holds neither). */
static bool resident(const entry *e) { return e->model || e->object; }

static bool same_key(const entry *e, const char *path, const wm_load_options *o) {
    return !e->owner.release && e->mode == o->mode && e->lock == o->lock &&
           e->backend == o->backend && e->device == o->device && strcmp(e->path, path) == 0;
}

/* A mapped CPU model sleeps when evicted: its pages stay in the page cache. */
static bool sleeps(const entry *e) {
    return !e->owner.release && e->backend == WM_BACKEND_CPU && e->mode == WM_MODE_MMAP &&
           e->lock == WM_LOCK_OFF;
}

static uint64_t held_by(const wm_pool *p, bool in_use_only, int device) {
    uint64_t s = 0;
    for (const entry *e = p->head; e; e = e->next) {
        if (!resident(e) || (in_use_only && !e->uses)) continue;
        s += device < 0 ? e->held : e->came_dev[device];
    }
    return s;
}

/* ---- proofs ---- */

static void snapshot(wm_ledger *l, wm_ledger_stat dev[WM_LEDGER_DEVICES]) {
    *l = (wm_ledger)WM_LEDGER_INIT;
    wm_ledger_get(l);
    for (int d = 0; d < WM_LEDGER_DEVICES; d++)
        wm_ledger_device(d, &dev[d]);
}

static uint64_t fell(uint64_t before, uint64_t after) {
    return before > after ? before - after : 0;
}

/* What e's owner holds now (zeros for a model, or an owner without counts). */
static void owner_counts(const entry *e, wm_pool_counts *c) {
    *c = (wm_pool_counts){.size = sizeof *c};
    if (e->owner.count) e->owner.count(c);
}

/* Releases e's model (or object) and proves it by the ledger: every category (and device) fell by
 * at least what it rose by when the model came; an object's owner's counts too (host: came_own;
 * each device: the ledger's and the owner's falls together, came_dev). Returns the host bytes
 * returned. */
static uint64_t evict(wm_pool *p, entry *e) {
    wm_ledger before, after;
    wm_ledger_stat db[WM_LEDGER_DEVICES], da[WM_LEDGER_DEVICES];
    wm_pool_counts ob, oa;
    snapshot(&before, db);
    owner_counts(e, &ob);
    if (e->object)
        e->owner.release(e->object);
    else
        wm_model_release(e->model);
    e->model = NULL;
    e->object = NULL;
    snapshot(&after, da);
    owner_counts(e, &oa);
    uint64_t own = fell(ob.host, oa.host);
    bool proven = own >= e->came_own;
    uint64_t returned = own, want = e->came_own, got = own < e->came_own ? own : e->came_own;
    for (int c = 0; c < WM_LEDGER_COUNT; c++) {
        uint64_t f = fell(before.cat[c].current, after.cat[c].current);
        proven &= f >= e->came[c];
        want += e->came[c];
        got += f < e->came[c] ? f : e->came[c];
    }
    for (size_t k = 0; k < sizeof host_cats / sizeof host_cats[0]; k++)
        returned += fell(before.cat[host_cats[k]].current, after.cat[host_cats[k]].current);
    uint64_t dev = fell(before.cat[WM_LEDGER_DEVICE].current, after.cat[WM_LEDGER_DEVICE].current);
    for (int d = 0; d < WM_LEDGER_DEVICES; d++) {
        uint64_t od = fell(ob.device[d], oa.device[d]);
        uint64_t back = fell(db[d].current, da[d].current) + od;
        proven &= back >= e->came_dev[d];
        want += e->came_dev[d];
        got += back < e->came_dev[d] ? back : e->came_dev[d];
        dev += od;
    }
    if (!proven) { /* host and devices together, for the error */
        p->short_want = want;
        p->short_got = got;
    }
    p->st.returned_device += dev;
    p->st.last_returned_device += dev;
    p->st.evictions++;
    p->st.returned += returned;
    p->st.unproven += !proven;
    p->st.last_returned += returned;
    p->st.last_evicted++;
    return returned;
}

/* Takes e off the list and frees it (its model already released). */
static void unlink_entry(wm_pool *p, entry *e) {
    for (entry **pp = &p->head; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    entry_free(e);
}

/* Evicts e: a sleeping kind stays listed, asleep; any other goes. */
static void evict_entry(wm_pool *p, entry *e) {
    evict(p, e);
    if (!sleeps(e) || e->stale) unlink_entry(p, e);
}

/* ---- sleeping (WM_POOL_SLEEP) ---- */

static bool asleep(const entry *e) { return e->model && wm__model_asleep(e->model); }

static uint64_t device_bytes(const entry *e) {
    uint64_t s = 0;
    for (int d = 0; d < WM_LEDGER_DEVICES; d++)
        s += e->came_dev[d];
    return s;
}

/* What the ledger did across a sleep or a wake, applied to e's credit: each category's rise
 * added, its fall taken off; the devices' figures replaced. */
static void recredit(entry *e, const wm_ledger *b, const wm_ledger *a, const wm_ledger_stat *db,
                     const wm_ledger_stat *da) {
    e->held = 0;
    for (int c = 0; c < WM_LEDGER_COUNT; c++) {
        uint64_t up = fell(a->cat[c].current, b->cat[c].current);
        uint64_t down = fell(b->cat[c].current, a->cat[c].current);
        e->came[c] = e->came[c] + up > down ? e->came[c] + up - down : 0;
    }
    for (size_t k = 0; k < sizeof host_cats / sizeof host_cats[0]; k++)
        e->held += e->came[host_cats[k]];
    for (int d = 0; d < WM_LEDGER_DEVICES; d++)
        e->came_dev[d] =
            e->came_dev[d] + fell(da[d].current, db[d].current) > fell(db[d].current, da[d].current)
                ? e->came_dev[d] + fell(da[d].current, db[d].current) -
                      fell(db[d].current, da[d].current)
                : 0;
}

/* Puts e's model to sleep in host memory: proven when every device gave back what the
 * model held there. On failure the model is as it was (awake). */
static wm_status sleep_entry(wm_pool *p, entry *e, wm_error *err) {
    wm_ledger b, a;
    wm_ledger_stat db[WM_LEDGER_DEVICES], da[WM_LEDGER_DEVICES];
    snapshot(&b, db);
    wm_status st = wm__model_sleep(e->model, err);
    if (st) return st;
    snapshot(&a, da);
    bool proven = true;
    uint64_t want = 0, got = 0;
    for (int d = 0; d < WM_LEDGER_DEVICES; d++) {
        uint64_t f = fell(db[d].current, da[d].current);
        e->slept_dev[d] = e->came_dev[d];
        proven &= f >= e->came_dev[d];
        want += e->came_dev[d];
        got += f < e->came_dev[d] ? f : e->came_dev[d];
    }
    if (!proven) {
        p->short_want = want;
        p->short_got = got;
    }
    uint64_t dev = fell(b.cat[WM_LEDGER_DEVICE].current, a.cat[WM_LEDGER_DEVICE].current);
    recredit(e, &b, &a, db, da);
    const wm__swap_times *t = &e->model->slept;
    p->st.last_sleep_seconds += t->total;
    p->st.last_sleep_alloc_seconds += t->host_alloc;
    p->st.last_sleep_register_seconds += t->host_register;
    p->st.last_sleep_copy_seconds += t->copy;
    p->st.last_sleep_free_seconds += t->device_free;
    p->st.last_sleep_bytes += t->bytes;
    p->st.sleeps++;
    p->st.unproven += !proven;
    p->st.returned_device += dev;
    p->st.last_returned_device += dev;
    return WM_OK;
}

/* Wakes e's model (its device room made by the caller); on failure it stays asleep. */
static wm_status wake_entry(wm_pool *p, entry *e, wm_error *err) {
    wm_ledger b, a;
    wm_ledger_stat db[WM_LEDGER_DEVICES], da[WM_LEDGER_DEVICES];
    snapshot(&b, db);
    double t0 = wm__os_now();
    wm_status st = wm__model_wake(e->model, err);
    p->st.last_wake_seconds = wm__os_now() - t0;
    if (st) return st;
    snapshot(&a, da);
    recredit(e, &b, &a, db, da);
    const wm__swap_times *t = &e->model->woke;
    p->st.last_wake_alloc_seconds = t->device_alloc;
    p->st.last_wake_copy_seconds = t->copy;
    p->st.last_wake_unregister_seconds = t->host_unregister;
    p->st.last_wake_free_seconds = t->host_free;
    p->st.last_wake_bytes = t->bytes;
    p->st.wakes++;
    return WM_OK;
}

/* ---- evicting ---- */

/* The least recently used idle resident model, or NULL. */
static entry *lru_idle(wm_pool *p) {
    entry *best = NULL;
    for (entry *e = p->head; e; e = e->next)
        if (resident(e) && !e->uses && (!best || e->last < best->last)) best = e;
    return best;
}

/* Whether `need` host bytes and need_dev device bytes (per device) fit beside what stays,
 * counting only models in use (in_use) or every resident one. */
static bool fits(const wm_pool *p, uint64_t need, const uint64_t *need_dev, bool in_use) {
    if (p->o.budget && held_by(p, in_use, -1) + need > p->o.budget) return false;
    for (int d = 0; p->o.device_budget && d < WM_LEDGER_DEVICES; d++)
        if (need_dev[d] && held_by(p, in_use, d) + need_dev[d] > p->o.device_budget) return false;
    return true;
}

/* The least recently used idle awake model holding memory on device d, or NULL. */
static entry *lru_idle_on(wm_pool *p, int d) {
    entry *best = NULL;
    for (entry *e = p->head; e; e = e->next)
        if (resident(e) && !e->uses && !asleep(e) && e->came_dev[d] &&
            (!best || e->last < best->last))
            best = e;
    return best;
}

/* A device (0 ..) short of room for need_dev beside every resident model, or -1. */
static int device_short(const wm_pool *p, const uint64_t *need_dev) {
    for (int d = 0; p->o.device_budget && d < WM_LEDGER_DEVICES; d++)
        if (need_dev[d] && held_by(p, false, d) + need_dev[d] > p->o.device_budget) return d;
    return -1;
}

static bool host_fits(const wm_pool *p, uint64_t need) {
    return !p->o.budget || held_by(p, false, -1) + need <= p->o.budget;
}

/* Idle models go, least recently used first, until need and need_dev fit: for a device short of
 * room, those holding memory there (asleep in host memory instead, with WM_POOL_SLEEP, where
 * the host has room for the copy), for the host, any. Each eviction or sleep must be proven by
 * the ledger before the next step: else WM_EIO naming the model, and the load does not start. */
static wm_status free_room(wm_pool *p, const char *path, uint64_t need, const uint64_t *need_dev,
                           wm_error *err) {
    for (;;) {
        bool host_ok = host_fits(p, need);
        int d = device_short(p, need_dev);
        if (host_ok && d < 0) return WM_OK;
        entry *e = d >= 0 ? lru_idle_on(p, d) : lru_idle(p);
        if (!e) return WM_OK; /* the load itself will say what is short */
        uint64_t unproven = p->st.unproven;
        char gone[256], by[96] = "the ledger shows";
        snprintf(gone, sizeof gone, "%s", e->path);
        if (e->owner.count)
            snprintf(by, sizeof by, "the ledger and %s's counts show",
                     e->owner.name ? e->owner.name : "the owner");
        bool slept = d >= 0 && host_ok && (p->o.flags & WM_POOL_SLEEP) && e->model &&
                     wm__model_can_sleep(e->model) &&
                     host_fits(p, need + device_bytes(e) + wm__model_swap_extra(e->model)) &&
                     sleep_entry(p, e, NULL) == WM_OK;
        if (!slept) evict_entry(p, e); /* e may be freed */
        if (p->st.unproven != unproven)
            return wm__err(err, WM_EIO, 0,
                           "%s: %s %llu of the %llu bytes of %s back after its %s (another load "
                           "in the process meanwhile?); this load did not start",
                           path, by, (unsigned long long)p->short_got,
                           (unsigned long long)p->short_want, gone, slept ? "sleep" : "eviction");
    }
}

/* Refuses (before anything is evicted) a load that cannot fit even with every idle model gone,
 * then evicts idle models, least recently used first, until it fits. */
static wm_status make_room(wm_pool *p, const char *path, uint64_t need, const uint64_t *need_dev,
                           wm_error *err) {
    if (p->o.budget && need > p->o.budget)
        return wm__err(err, WM_ENOMEM, 0,
                       "%s: its load needs %llu bytes at its peak, more than the pool's budget of "
                       "%llu bytes",
                       path, (unsigned long long)need, (unsigned long long)p->o.budget);
    for (int d = 0; p->o.device_budget && d < WM_LEDGER_DEVICES; d++)
        if (need_dev[d] > p->o.device_budget)
            return wm__err(err, WM_ENOMEM, 0,
                           "%s: its load needs %llu bytes on device %d, more than the pool's "
                           "device budget of %llu bytes",
                           path, (unsigned long long)need_dev[d], d,
                           (unsigned long long)p->o.device_budget);
    if (!fits(p, need, need_dev, true))
        return wm__err(err, WM_ENOMEM, 0,
                       "%s: its load needs %llu bytes at its peak, and the models in use hold "
                       "%llu of the budget's %llu bytes (put one back first)",
                       path, (unsigned long long)need, (unsigned long long)held_by(p, true, -1),
                       (unsigned long long)p->o.budget);
    return free_room(p, path, need, need_dev, err);
}

/* ---- get and put ---- */

wm_status wm_pool_open(const wm_pool_options *opts, wm_pool **out, wm_error *err) {
    if (out) *out = NULL;
    if (!opts || !out) return wm__err(err, WM_EINVAL, 0, "wm_pool_open: NULL options or out");
    wm_pool_options o;
    wm_status st =
        wm__struct_in(&o, sizeof o, opts, sizeof o, "wm_pool_open: wm_pool_options", err);
    if (st) return st;
    wm_pool *p = wm__calloc(1, sizeof *p);
    if (!p) return wm__err(err, WM_ENOMEM, 0, "wm_pool_open: out of memory");
    int e = wm__os_mutex_init(&p->mu);
    if (e) {
        wm__free(p);
        return wm__err(err, WM_ENOMEM, e, "wm_pool_open: cannot make the pool's lock: %s",
                       wm__errno_text(e));
    }
    if (o.flags & ~WM_POOL_SLEEP) {
        wm__os_mutex_destroy(&p->mu);
        wm__free(p);
        return wm__err(err, WM_EINVAL, 0, "wm_pool_open: unknown flags 0x%x", o.flags);
    }
    p->o = o;
    p->st.size = sizeof p->st;
    *out = p;
    return WM_OK;
}

static bool file_changed(const wm_os_stat *then, const wm_os_stat *now) {
    return then->dev != now->dev || then->ino != now->ino || then->size != now->size ||
           then->mtime_ns != now->mtime_ns;
}

/* A resident model asked for again: the same file, or WM_EFORMAT (and the stale model goes as
 * soon as it is idle). */
static wm_status reuse(wm_pool *p, entry *e, void **out, wm_error *err) {
    wm_os_stat now;
    int x = wm__os_stat_path(e->path, &now);
    if (x || file_changed(&e->st, &now)) {
        e->stale = true;
        unsigned uses = e->uses;
        wm_status st;
        if (x)
            st = wm__err(err, wm__status_from_errno(x), x,
                         "%s: cannot stat the file of a resident model: %s%s", e->path,
                         wm__errno_text(x), uses ? "" : " (the model was released)");
        else
            st = wm__err(err, WM_EFORMAT, 0,
                         "%s: the file changed since its resident model was loaded (%llu bytes, "
                         "now %llu); %s",
                         e->path, (unsigned long long)e->st.size, (unsigned long long)now.size,
                         uses ? "its model, in use, goes at its last put"
                              : "its model was released: get it again to load the file as it is");
        if (!uses) evict_entry(p, e); /* e is freed */
        return st;
    }
    e->uses++; /* in use from here: never chosen to make room for itself */
    if (asleep(e)) {
        /* the wake's own host bytes (the bounce ring) while it runs */
        wm_status st = make_room(p, e->path, wm__model_swap_extra(e->model), e->slept_dev, err);
        if (!st) st = wake_entry(p, e, err);
        if (st) {
            e->uses--;
            return st;
        }
    } else {
        p->st.hits++;
    }
    e->last = ++p->tick;
    *out = e->object ? e->object : (void *)e->model;
    return WM_OK;
}

/* Opens, costs, makes room for and loads e's file; e->came holds what the ledger rose by: the
 * open file's bytes and the load's, each measured around its own step (an eviction between them
 * returns bytes the new model must not be credited with). */
static wm_status load_entry(wm_pool *p, entry *e, const wm_load_options *opts, wm_error *err) {
    wm_ledger l0, l1, l2, l3;
    wm_ledger_stat d0[WM_LEDGER_DEVICES], d1[WM_LEDGER_DEVICES];
    wm_ledger_stat d2[WM_LEDGER_DEVICES], d3[WM_LEDGER_DEVICES];
    /* the path as it is now (an index's own stat for a set): what a later get compares */
    wm_os_stat now;
    int x = wm__os_stat_path(e->path, &now);
    if (x)
        return wm__err(err, wm__status_from_errno(x), x, "%s: cannot open: %s", e->path,
                       wm__errno_text(x));
    snapshot(&l0, d0);
    wm_file *f = NULL;
    wm_status st = wm_file_open(e->path, &f, err);
    if (st) return st;
    snapshot(&l1, d1);
    uint64_t need = 0;
    for (size_t k = 0; k < sizeof host_cats / sizeof host_cats[0]; k++)
        need += fell(l1.cat[host_cats[k]].current, l0.cat[host_cats[k]].current);
    wm_cost c = WM_COST_INIT;
    st = wm_model_cost(f, opts, &c, err);
    need += c.host_peak;
    if (!st) st = make_room(p, e->path, need, c.device_peak, err);
    if (!st) {
        uint64_t at_peak = held_by(p, false, -1) + need;
        if (at_peak > p->st.held_peak) p->st.held_peak = at_peak;
        e->st = now;
        snapshot(&l2, d2);
        st = wm_model_load(f, opts, &e->model, err);
    }
    wm_file_close(f); /* a loaded model holds the file */
    if (st) return st;
    snapshot(&l3, d3);
    e->held = 0;
    for (int k = 0; k < WM_LEDGER_COUNT; k++)
        e->came[k] =
            fell(l1.cat[k].current, l0.cat[k].current) + fell(l3.cat[k].current, l2.cat[k].current);
    for (size_t k = 0; k < sizeof host_cats / sizeof host_cats[0]; k++)
        e->held += e->came[host_cats[k]];
    for (int d = 0; d < WM_LEDGER_DEVICES; d++)
        e->came_dev[d] = fell(d1[d].current, d0[d].current) + fell(d3[d].current, d2[d].current);
    p->st.loads++;
    return WM_OK;
}

static wm_status get_locked(wm_pool *p, const char *path, const wm_load_options *opts,
                            wm_model **out, wm_error *err) {
    entry *e = p->head;
    while (e && !same_key(e, path, opts))
        e = e->next;
    if (e && e->model) {
        void *m;
        wm_status st = reuse(p, e, &m, err);
        if (!st) *out = m;
        return st;
    }
    bool fresh = !e;
    if (fresh) {
        e = wm__calloc(1, sizeof *e);
        if (e) e->path = wm__strdup(path);
        if (!e || !e->path) {
            entry_free(e);
            return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the pool's entry", path);
        }
        *e = (entry){.path = e->path,
                     .mode = opts->mode,
                     .lock = opts->lock,
                     .backend = opts->backend,
                     .device = opts->device,
                     .st = {0},
                     .next = NULL};
    }
    wm_status st = load_entry(p, e, opts, err);
    if (st) {
        if (fresh) entry_free(e);
        return st;
    }
    p->st.wakes += !fresh;
    if (fresh) {
        e->next = p->head;
        p->head = e;
    }
    e->uses = 1;
    e->last = ++p->tick;
    *out = e->model;
    return WM_OK;
}

/* The start of a get (of a model or an object): what the stats say of the last get, zeroed. */
static void last_clear(wm_pool_stats *s) {
    s->last_returned = 0;
    s->last_returned_device = 0;
    s->last_evicted = 0;
    s->last_wake_seconds = 0;
    s->last_wake_alloc_seconds = s->last_wake_copy_seconds = 0;
    s->last_wake_unregister_seconds = s->last_wake_free_seconds = 0;
    s->last_wake_bytes = 0;
    s->last_sleep_seconds = s->last_sleep_alloc_seconds = s->last_sleep_register_seconds = 0;
    s->last_sleep_copy_seconds = s->last_sleep_free_seconds = 0;
    s->last_sleep_bytes = 0;
}

wm_status wm_pool_get(wm_pool *p, const char *path, const wm_load_options *opts, wm_model **out,
                      wm_error *err) {
    if (out) *out = NULL;
    if (!p || !path || !opts || !out)
        return wm__err(err, WM_EINVAL, 0, "wm_pool_get: NULL pool, path, options or out");
    wm__os_mutex_lock(&p->mu);
    double t0 = wm__os_now();
    last_clear(&p->st);
    wm_status st = get_locked(p, path, opts, out, err);
    p->st.last_get_seconds = wm__os_now() - t0;
    wm__os_mutex_unlock(&p->mu);
    return st;
}

/* One use of e given back (what: "wm_pool_put: the model", ...), under the lock. */
static wm_status put_locked(wm_pool *p, entry *e, const char *what, wm_error *err) {
    wm_status st = WM_OK;
    if (!e->uses)
        st = wm__err(err, WM_EINVAL, 0, "%s: %s is not in use (put back twice?)", e->path, what);
    else {
        e->uses--;
        e->last = ++p->tick;
        if (!e->uses && e->stale) evict_entry(p, e);
    }
    return st;
}

wm_status wm_pool_put(wm_pool *p, wm_model *model, wm_error *err) {
    if (!p || !model) return wm__err(err, WM_EINVAL, 0, "wm_pool_put: NULL pool or model");
    wm__os_mutex_lock(&p->mu);
    entry *e = p->head;
    while (e && (e->model != model || e->owner.release))
        e = e->next;
    wm_status st = e ? put_locked(p, e, "wm_pool_put: the model", err)
                     : wm__err(err, WM_EINVAL, 0, "%s: wm_pool_put: the model is not this pool's",
                               wm_file_path(wm_model_file(model)));
    wm__os_mutex_unlock(&p->mu);
    return st;
}

/* ---- objects of other libraries (wm_pool_get_object) ---- */

static bool same_object_key(const entry *e, const char *path, const wm_pool_owner *o,
                            const void *key, size_t key_len) {
    return e->owner.release == o->release && e->owner.load == o->load && e->key_len == key_len &&
           (!key_len || memcmp(e->key, key, key_len) == 0) && strcmp(e->path, path) == 0;
}

/* Costs, makes room for and loads e's object through its owner; e->came, came_dev and came_own
 * hold what the ledger and the owner's counts rose by across the load alone. */
static wm_status load_object(wm_pool *p, entry *e, void *args, wm_error *err) {
    wm_os_stat now;
    int x = wm__os_stat_path(e->path, &now);
    if (x)
        return wm__err(err, wm__status_from_errno(x), x, "%s: cannot open: %s", e->path,
                       wm__errno_text(x));
    wm_cost c = WM_COST_INIT;
    wm_status st = e->owner.cost(args, e->path, &c, err);
    if (!st) st = make_room(p, e->path, c.host_peak, c.device_peak, err);
    if (st) return st;
    uint64_t at_peak = held_by(p, false, -1) + c.host_peak;
    if (at_peak > p->st.held_peak) p->st.held_peak = at_peak;
    wm_ledger l0, l1;
    wm_ledger_stat d0[WM_LEDGER_DEVICES], d1[WM_LEDGER_DEVICES];
    wm_pool_counts o0, o1;
    snapshot(&l0, d0);
    owner_counts(e, &o0);
    void *obj = NULL;
    st = e->owner.load(args, e->path, &obj, err);
    if (!st && !obj)
        st = wm__err(err, WM_EINVAL, 0, "%s: the %s owner's load returned no object", e->path,
                     e->owner.name ? e->owner.name : "pool");
    if (st) return st;
    snapshot(&l1, d1);
    owner_counts(e, &o1);
    e->object = obj;
    e->st = now;
    e->came_own = fell(o1.host, o0.host);
    e->held = e->came_own;
    for (int k = 0; k < WM_LEDGER_COUNT; k++)
        e->came[k] = fell(l1.cat[k].current, l0.cat[k].current);
    for (size_t k = 0; k < sizeof host_cats / sizeof host_cats[0]; k++)
        e->held += e->came[host_cats[k]];
    for (int d = 0; d < WM_LEDGER_DEVICES; d++)
        e->came_dev[d] = fell(d1[d].current, d0[d].current) + fell(o1.device[d], o0.device[d]);
    p->st.loads++;
    return WM_OK;
}

/* A new entry of owner o's for path and key, not yet listed; NULL when out of memory. */
static entry *object_entry(const char *path, const wm_pool_owner *o, const void *key,
                           size_t key_len) {
    entry *e = wm__calloc(1, sizeof *e);
    if (!e) return NULL;
    e->path = wm__strdup(path);
    e->key = key_len ? wm__alloc(key_len) : NULL;
    if (!e->path || (key_len && !e->key)) {
        entry_free(e);
        return NULL;
    }
    if (key_len) memcpy(e->key, key, key_len);
    e->key_len = key_len;
    e->owner = *o;
    return e;
}

static wm_status get_object_locked(wm_pool *p, const char *path, const wm_pool_owner *o,
                                   const void *key, size_t key_len, void *args, void **out,
                                   wm_error *err) {
    entry *e = p->head;
    while (e && !(e->owner.release && same_object_key(e, path, o, key, key_len)))
        e = e->next;
    if (e) return reuse(p, e, out, err); /* an object entry is listed only while resident */
    e = object_entry(path, o, key, key_len);
    if (!e) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the pool's entry", path);
    wm_status st = load_object(p, e, args, err);
    if (st) {
        entry_free(e);
        return st;
    }
    e->next = p->head;
    p->head = e;
    e->uses = 1;
    e->last = ++p->tick;
    *out = e->object;
    return WM_OK;
}

wm_status wm_pool_get_object(wm_pool *p, const char *path, const wm_pool_owner *owner,
                             const void *key, size_t key_len, void *args, void **out,
                             wm_error *err) {
    if (out) *out = NULL;
    if (!p || !path || !owner || !out || (key_len && !key))
        return wm__err(err, WM_EINVAL, 0, "wm_pool_get_object: NULL pool, path, owner, out or key");
    wm_pool_owner o;
    wm_status st =
        wm__struct_in(&o, sizeof o, owner, sizeof o, "wm_pool_get_object: wm_pool_owner", err);
    if (st) return st;
    if (!o.cost || !o.load || !o.release)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: wm_pool_get_object: the owner lacks its cost, load or release", path);
    wm__os_mutex_lock(&p->mu);
    double t0 = wm__os_now();
    last_clear(&p->st);
    st = get_object_locked(p, path, &o, key, key_len, args, out, err);
    p->st.last_get_seconds = wm__os_now() - t0;
    wm__os_mutex_unlock(&p->mu);
    return st;
}

wm_status wm_pool_put_object(wm_pool *p, void *object, wm_error *err) {
    if (!p || !object) return wm__err(err, WM_EINVAL, 0, "wm_pool_put_object: NULL pool or object");
    wm__os_mutex_lock(&p->mu);
    entry *e = p->head;
    while (e && e->object != object)
        e = e->next;
    wm_status st = e ? put_locked(p, e, "wm_pool_put_object: the object", err)
                     : wm__err(err, WM_EINVAL, 0,
                               "wm_pool_put_object: the object is not this pool's (put back "
                               "after its pool evicted it, or never got from it)");
    wm__os_mutex_unlock(&p->mu);
    return st;
}

/* ---- stats and close ---- */

void wm_pool_stats_get(wm_pool *p, wm_pool_stats *out) {
    if (!out) return;
    wm_pool_stats s = {.size = sizeof s};
    if (p) {
        wm__os_mutex_lock(&p->mu);
        s = p->st;
        s.resident = s.in_use = 0;
        for (const entry *e = p->head; e; e = e->next) {
            s.resident += resident(e);
            s.in_use += resident(e) && e->uses;
            s.asleep += asleep(e);
        }
        s.held = held_by(p, false, -1);
        wm__os_mutex_unlock(&p->mu);
    }
    wm__struct_out(out, &s, sizeof s, sizeof s);
}

static uint64_t trim_locked(wm_pool *p) {
    uint64_t returned = 0;
    entry *e;
    while ((e = lru_idle(p))) {
        uint64_t before = p->st.returned;
        evict_entry(p, e);
        returned += p->st.returned - before;
    }
    return returned;
}

uint64_t wm_pool_trim(wm_pool *p) {
    if (!p) return 0;
    wm__os_mutex_lock(&p->mu);
    uint64_t r = trim_locked(p);
    wm__os_mutex_unlock(&p->mu);
    return r;
}

wm_status wm_pool_close(wm_pool *p, wm_error *err) {
    if (!p) return WM_OK;
    wm__os_mutex_lock(&p->mu);
    for (const entry *e = p->head; e; e = e->next)
        if (resident(e) && e->uses) {
            wm_status st = wm__err(err, WM_EINVAL, 0,
                                   "%s: wm_pool_close: the model is in use (%u get%s not put "
                                   "back); the pool stays open",
                                   e->path, e->uses, e->uses == 1 ? "" : "s");
            wm__os_mutex_unlock(&p->mu);
            return st;
        }
    trim_locked(p);
    while (p->head)
        unlink_entry(p, p->head); /* asleep entries: nothing but their path */
    wm__os_mutex_unlock(&p->mu);
    wm__os_mutex_destroy(&p->mu);
    wm__free(p);
    return WM_OK;
}
