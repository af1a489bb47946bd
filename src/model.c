/*
 * model.c: the lifecycle of a loaded model: the options every backend shares, load and release
 * through the backend table (backends.c), and the getters. The load plan is built in plan.c;
 * backends load into host memory of backend/host.c (regions, locking) and read through the
 * reading engine (src/read/, met in backend/jobs.c).
 *
 * Sections: names; options; load and release; getters.
 */
#include "backend/backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ---- */

const char *wm_mode_name(wm_mode mode) {
    switch (mode) {
    case WM_MODE_HEAP: return "heap";
    case WM_MODE_MMAP: return "mmap";
    case WM_MODE_MMAP_PRIVATE: return "mmap-private";
    default: return NULL;
    }
}

wm_mode wm_mode_from_name(const char *name) {
    if (!name) return WM_MODE_NONE;
    for (int m = WM_MODE_HEAP; m <= WM_MODE_MMAP_PRIVATE; m++)
        if (strcmp(name, wm_mode_name((wm_mode)m)) == 0) return (wm_mode)m;
    return WM_MODE_NONE;
}

/* ---- options ---- */

/* Several devices: each a number the ledger can count (0 .. WM_LEDGER_DEVICES-1), none twice. */
static wm_status check_devices(const char *path, const wm_load_options *o, wm_error *err) {
    if (o->n_devices > 1 && !o->devices)
        return wm__err(err, WM_EINVAL, 0, "%s: n_devices %u without devices", path, o->n_devices);
    if (o->n_devices > WM_LEDGER_DEVICES)
        return wm__err(err, WM_EINVAL, 0, "%s: %u devices, at most %d", path, o->n_devices,
                       WM_LEDGER_DEVICES);
    for (unsigned k = 0; o->devices && k < o->n_devices; k++) {
        if (o->devices[k] < 0 || o->devices[k] >= WM_LEDGER_DEVICES)
            return wm__err(err, WM_EINVAL, 0, "%s: device %d is out of range (0..%d)", path,
                           o->devices[k], WM_LEDGER_DEVICES - 1);
        for (unsigned j = 0; j < k; j++)
            if (o->devices[j] == o->devices[k])
                return wm__err(err, WM_EINVAL, 0, "%s: device %d is listed twice", path,
                               o->devices[k]);
    }
    if ((unsigned)o->placement > WM_PLACE_CALLBACK)
        return wm__err(err, WM_EINVAL, 0, "%s: unknown placement %d", path, (int)o->placement);
    if (o->placement == WM_PLACE_CALLBACK && !o->place_tensor)
        return wm__err(err, WM_EINVAL, 0, "%s: placement callback without place_tensor", path);
    return WM_OK;
}

/* Tensor parallelism reads slices into a packed layout, never converting. */
static wm_status check_tp(const char *path, const wm__backend *be, const wm_load_options *o,
                          wm_error *err) {
    if (o->tp_world <= 1) return WM_OK;
    if (o->tp_rank >= o->tp_world)
        return wm__err(err, WM_EINVAL, 0, "%s: tp_rank %u of tp_world %u", path, o->tp_rank,
                       o->tp_world);
    if (!o->tp_split && !o->cuda->nccl_comm)
        return wm__err(err, WM_EINVAL, 0, "%s: tp_world %u without tp_split", path, o->tp_world);
    if (o->n_convert)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: conversion on load and tensor parallelism do not combine", path);
    if (be->maps_file && o->mode != WM_MODE_HEAP)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: tensor parallelism on the %s backend needs mode heap (a mapping "
                       "holds whole tensors), not %s",
                       path, be->name, wm_mode_name(o->mode));
    return WM_OK;
}

/* A selection names each tensor once, by an index the file has, and row ranges that a packed
 * layout can hold (the rules at wm_load_options.select). */
static wm_status check_select(const wm_file *f, const wm__backend *be, const wm_load_options *o,
                              wm_error *err) {
    const char *path = f->path;
    if (!o->n_select) return WM_OK;
    if (!o->select) return wm__err(err, WM_EINVAL, 0, "%s: n_select without select", path);
    if (o->tp_world > 1 || o->cuda->nccl_comm)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: a selection does not combine with tensor parallelism or read-once",
                       path);
    for (size_t k = 0; k < o->n_select; k++) {
        const wm_tensor_select *s = &o->select[k];
        if (s->tensor >= f->n_tensors)
            return wm__err(err, WM_EINVAL, 0, "%s: select[%zu] names tensor %zu of %zu", path, k,
                           s->tensor, f->n_tensors);
        const wm__tensor *t = &f->tensors[s->tensor];
        const char *name = f->names + t->name_off;
        for (size_t j = 0; j < k; j++)
            if (o->select[j].tensor == s->tensor)
                return wm__err(err, WM_EINVAL, 0, "%s: tensor '%s' is selected twice", path, name);
        if (!s->row_begin && !s->row_end) continue;
        if (t->n_dims == 0)
            return wm__err(err, WM_EINVAL, 0, "%s: tensor '%s' is a scalar: it has no rows", path,
                           name);
        uint64_t rows = t->ne[t->n_dims - 1];
        uint64_t blk = t->n_dims == 1 ? wm_type_block_elems((wm_type)t->type) : 1;
        if (s->row_begin >= s->row_end || s->row_end > rows || s->row_begin % blk ||
            s->row_end % blk)
            return wm__err(err, WM_EINVAL, 0,
                           "%s: tensor '%s': rows [%llu, %llu) of %llu%s are not a range to load",
                           path, name, (unsigned long long)s->row_begin,
                           (unsigned long long)s->row_end, (unsigned long long)rows,
                           blk > 1 ? " (whole blocks)" : "");
        if (o->n_convert)
            return wm__err(err, WM_EINVAL, 0,
                           "%s: tensor '%s': row ranges and conversion on load do not combine",
                           path, name);
        if (be->maps_file && o->mode != WM_MODE_HEAP)
            return wm__err(err, WM_EINVAL, 0,
                           "%s: tensor '%s': a row range needs a packed layout (mode heap, or a "
                           "device backend), not mode %s",
                           path, name, wm_mode_name(o->mode));
    }
    return WM_OK;
}

/* The caller's options (and the CUDA options they point to) copied into the library's own
 * structs, zero-extended (the ABI promise); `o->cuda` then points to `cu`, the defaults when the
 * caller gave none. */
static wm_status options_in(const char *path, const wm_load_options *in, wm_load_options *o,
                            wm_cuda_options *cu, wm_error *err) {
    char what[300];
    snprintf(what, sizeof what, "%s: wm_load_options", path);
    wm_status st = wm__struct_in(o, sizeof *o, in, WM__LOAD_OPTIONS_SIZE_1_0, what, err);
    if (st) return st;
    wm_cuda_options none = WM_CUDA_OPTIONS_INIT;
    if (o->cuda && o->backend != WM_BACKEND_CUDA)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: CUDA options (opts.cuda) given for the %s backend: they need the CUDA "
                       "backend",
                       path, wm_backend_name(o->backend) ? wm_backend_name(o->backend) : "unknown");
    snprintf(what, sizeof what, "%s: wm_cuda_options", path);
    st = wm__struct_in(cu, sizeof *cu, o->cuda ? o->cuda : &none, WM__CUDA_OPTIONS_SIZE_1_0, what,
                       err);
    if (st) return st;
    o->cuda = cu;
    return WM_OK;
}

/* The modes that read (heap, the CUDA staged path) read by opts.direct_io, or always directly when
 * the CUDA options ask for direct_io; the others map the file and read nothing. */
static bool reads_file(const wm__backend *be, const wm_load_options *o) {
    return o->mode == WM_MODE_HEAP || (!be->maps_file && !o->cuda->registered);
}

static wm_status check_io(const char *path, const wm__backend *be, const wm_load_options *o,
                          wm_error *err) {
    if ((unsigned)o->direct_io > WM_DIRECT_ON)
        return wm__err(err, WM_EINVAL, 0, "%s: unknown direct_io %d (AUTO, OFF or ON)", path,
                       (int)o->direct_io);
    if (o->direct_io != WM_DIRECT_AUTO && !reads_file(be, o))
        return wm__err(err, WM_EINVAL, 0,
                       "%s: direct_io %s applies to the modes that read the file (heap, the CUDA "
                       "staged path); mode %s%s maps it",
                       path, o->direct_io == WM_DIRECT_ON ? "on" : "off", wm_mode_name(o->mode),
                       o->cuda->registered ? " (registered)" : "");
    if (o->direct_io == WM_DIRECT_OFF && o->cuda->direct_io)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: direct_io off and the CUDA option direct_io ask for opposite reads",
                       path);
    return WM_OK;
}

static wm_direct_io read_policy(const wm__backend *be, const wm_load_options *o) {
    if (!reads_file(be, o)) return WM_DIRECT_OFF; /* nothing is read: no direct descriptors */
    return o->cuda->direct_io ? WM_DIRECT_ON : o->direct_io;
}

/* The checks every backend shares; then the backend's own (its check slot). All of them run
 * before anything is acquired. */
static wm_status check_options(const wm_file *f, const wm__backend *be, const wm_load_options *o,
                               wm_error *err) {
    const char *path = f->path;
    if (o->mode < WM_MODE_HEAP || o->mode > WM_MODE_MMAP_PRIVATE)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: no load mode: choose heap, mmap or mmap-private (there is no default)",
                       path);
    if ((unsigned)o->lock > WM_LOCK_BEST_EFFORT)
        return wm__err(err, WM_EINVAL, 0, "%s: unknown lock option %d", path, (int)o->lock);
    if (o->lock != WM_LOCK_OFF && o->mode == WM_MODE_MMAP_PRIVATE)
        return wm__err(err, WM_EINVAL, 0,
                       "%s: refusing to lock a writable private mapping: mlock would privatise "
                       "every page (use mmap or heap with a lock)",
                       path);
    if (o->n_convert && !o->convert)
        return wm__err(err, WM_EINVAL, 0, "%s: n_convert without convert rules", path);
    if (o->n_convert && o->mode != WM_MODE_HEAP)
        return wm__err(err, WM_EINVAL, 0, "%s: conversion on load needs mode heap (mode %s)", path,
                       wm_mode_name(o->mode));
    if (o->max_buffer_size && o->max_buffer_size < wm__os_page_size())
        return wm__err(err, WM_EINVAL, 0, "%s: max_buffer_size %llu is below the page size", path,
                       (unsigned long long)o->max_buffer_size);
    wm_status st = check_devices(path, o, err);
    if (!st) st = check_io(path, be, o, err);
    if (!st) st = check_tp(path, be, o, err);
    if (!st) st = check_select(f, be, o, err);
    if (st) return st;
    return be->check ? be->check(f, o, err) : WM_OK;
}

/* ---- load and release ---- */

static void model_free(wm_model *m) {
    if (!m) return;
    m->backend->release(m); /* accepts a model it never loaded (bctx NULL) */
    wm__reader_free(&m->rd);
    wm__free(m->order);
    wm__free(m->place);
    wm__free(m->chunks);
    wm_file *f = m->file;
    wm__free(m);
    wm__file_unref(f);
}

static void model_free_task(void *m) { model_free(m); }

/* A release may run on any thread, a caller's long-lived one included: inside the OS's task
 * scope (Darwin: an autorelease pool), so that whatever a backend's release autoreleases is
 * freed before this returns, not when that thread exits. */
void wm_model_release(wm_model *m) {
    if (m) wm__os_task_scope(model_free_task, m);
}

/* A file that changed size since it was opened cannot be trusted (a mapping past its end would
 * fault later). */
static wm_status check_unchanged(const wm_file *file, wm_error *err) {
    for (uint32_t s = 0; s < file->n_shards; s++) {
        wm_os_stat now;
        int e = wm__os_stat(file->shards[s].fd, &now);
        if (e)
            return wm__err(err, wm__status_io(e), e, "%s: cannot stat: %s", file->shards[s].path,
                           wm__errno_text(e));
        if (now.size != file->shards[s].st.size)
            return wm__err(err, WM_EFORMAT, 0,
                           "%s: the file changed size since it was opened (%llu bytes, now %llu)",
                           file->shards[s].path, (unsigned long long)file->shards[s].st.size,
                           (unsigned long long)now.size);
    }
    return WM_OK;
}

/* Everything wm_model_load does before it acquires memory for tensors: the options copied in
 * and checked, the backend, the file unchanged, the model object and its plan. On failure
 * nothing is held (*out NULL); on success the caller releases the model with model_free. */
static wm_status model_plan(wm_file *file, const wm_load_options *caller_opts, const char *who,
                            wm_model **out, wm_error *err) {
    *out = NULL;
    if (!file || !caller_opts) return wm__err(err, WM_EINVAL, 0, "%s: NULL file or options", who);
    wm_load_options o;
    wm_cuda_options cu;
    wm_status st = options_in(file->path, caller_opts, &o, &cu, err);
    if (st) return st;
    const wm_load_options *opts = &o;
    const wm__backend *be;
    st = wm__backend_get(opts->backend, file->path, &be, err);
    if (st) return st;
    st = check_options(file, be, opts, err);
    if (st) return st;
    wm_model *m = wm__calloc(1, sizeof *m);
    if (!m) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", file->path);
    m->file = wm__file_ref(file);
    m->backend = be;
    m->opts = *opts;
    m->cuda = cu;
    m->opts.cuda = &m->cuda;
    m->opts.convert = NULL;
    m->opts.n_convert = 0;
    m->n_devs = opts->n_devices > 1 ? opts->n_devices : 1;
    for (unsigned k = 0; k < m->n_devs; k++) /* a list of one names the device too */
        m->devs[k] = opts->devices && opts->n_devices ? opts->devices[k] : opts->device;
    m->opts.devices = NULL;
    m->opts.place_tensor = NULL;
    m->opts.tp_split = NULL; /* m->cuda.nccl_comm stays: the backend completes the load with it */
    m->opts.select = NULL;
    m->opts.n_select = 0;
    st = check_unchanged(file, err);
    if (!st) st = wm__plan_build(m, opts, err);
    if (st) {
        model_free(m);
        return st;
    }
    *out = m;
    return WM_OK;
}

wm_status wm_model_load(wm_file *file, const wm_load_options *caller_opts, wm_model **out,
                        wm_error *err) {
    if (out) *out = NULL;
    if (!file || !caller_opts || !out)
        return wm__err(err, WM_EINVAL, 0, "wm_model_load: NULL file, options or out");
    double t0 = wm__os_now();
    wm_model *m;
    wm_status st = model_plan(file, caller_opts, "wm_model_load", &m, err);
    if (st) return st;
    st = wm__reader_init(&m->rd, file, read_policy(m->backend, &m->opts), err);
    if (st) goto fail;
    st = m->backend->load(m, err);
    wm__reader_free(&m->rd); /* the direct descriptors live for the load only */
    if (st) goto fail;
    m->stats.load_seconds = wm__os_now() - t0;
    m->stats.bytes_read = atomic_load(&m->rd.bytes_read);
    m->stats.read_direct = atomic_load(&m->rd.direct_bytes);
    m->stats.read_buffered = atomic_load(&m->rd.buffered_bytes);
    *out = m;
    return WM_OK;
fail:
    model_free(m);
    return st;
}

/* The same plan as wm_model_load, costed instead of run (cost.c). */
wm_status wm_model_cost(wm_file *file, const wm_load_options *caller_opts, wm_cost *out,
                        wm_error *err) {
    if (!file || !caller_opts || !out)
        return wm__err(err, WM_EINVAL, 0, "wm_model_cost: NULL file, options or out");
    wm_model *m;
    wm_status st = model_plan(file, caller_opts, "wm_model_cost", &m, err);
    if (st) return st;
    wm_cost c = {.size = sizeof c};
    wm_direct_io io = read_policy(m->backend, &m->opts);
    wm__cost_plan_tables(m, &c);
    wm__cost_reader(m, io, &c);
    st = m->backend->cost(m, io, &c, err);
    if (!st) {
        wm__cost_finish(m, &c);
        wm__struct_out(out, &c, sizeof c, sizeof c);
    }
    model_free(m);
    return st;
}

/* ---- sleep and wake (the pool's) ---- */

bool wm__model_can_sleep(const wm_model *m) { return m && m->backend->sleep; }
bool wm__model_asleep(const wm_model *m) { return m && m->asleep; }
uint64_t wm__model_swap_extra(const wm_model *m) {
    return m && m->backend->swap_extra ? m->backend->swap_extra(m) : 0;
}

wm_status wm__model_sleep(wm_model *m, wm_error *err) {
    if (!m || !m->backend->sleep)
        return wm__err(err, WM_EUNSUPPORTED, 0, "%s: the %s backend cannot sleep a model",
                       m ? m->file->path : "wm__model_sleep", m ? m->backend->name : "?");
    if (m->asleep)
        return wm__err(err, WM_EINVAL, 0, "%s: the model is asleep already", m->file->path);
    wm_status st = m->backend->sleep(m, err);
    if (!st) m->asleep = true;
    return st;
}

wm_status wm__model_wake(wm_model *m, wm_error *err) {
    if (!m || !m->asleep)
        return wm__err(err, WM_EINVAL, 0, "%s: the model is not asleep",
                       m ? m->file->path : "wm__model_wake");
    wm_status st = m->backend->wake(m, err);
    if (!st) m->asleep = false;
    return st;
}

/* ---- getters ---- */

const wm_file *wm_model_file(const wm_model *m) { return m ? m->file : NULL; }
wm_mode wm_model_mode(const wm_model *m) { return m ? m->opts.mode : WM_MODE_NONE; }

wm_status wm_model_tensor_info(const wm_model *m, size_t index, wm_type *type, uint64_t *nbytes) {
    if (!m) return WM_EINVAL;
    if (index >= m->file->n_tensors) return WM_ERANGE;
    if (m->place[index].chunk == WM__NOT_LOADED) return WM_ENOENT;
    if (type) *type = m->place[index].type;
    if (nbytes) *nbytes = m->place[index].nbytes;
    return WM_OK;
}

const void *wm_model_tensor_data(const wm_model *m, size_t index) {
    if (!m || index >= m->file->n_tensors) return NULL;
    return m->backend->host_ptr(m, index);
}

void *wm_model_tensor_data_mut(wm_model *m, size_t index) {
    if (!m || m->opts.mode == WM_MODE_MMAP || index >= m->file->n_tensors) return NULL;
    return m->backend->host_ptr(m, index);
}

wm_status wm_model_tensor_shape(const wm_model *m, size_t index, uint64_t shape[WM_MAX_DIMS],
                                uint32_t *n_dims, wm_split *split) {
    if (!m || !shape) return WM_EINVAL;
    if (index >= m->file->n_tensors) return WM_ERANGE;
    const wm__place *p = &m->place[index];
    if (p->chunk == WM__NOT_LOADED) return WM_ENOENT;
    for (int d = 0; d < WM_MAX_DIMS; d++)
        shape[d] = p->ne[d];
    if (n_dims) *n_dims = p->n_dims;
    if (split) *split = p->split;
    return WM_OK;
}

int wm_model_tensor_device(const wm_model *m, size_t index) {
    if (!m || index >= m->file->n_tensors || !m->backend->device_ptr(m, index)) return -1;
    return m->devs[m->place[index].device];
}

uint64_t wm_model_tensor_device_ptr(const wm_model *m, size_t index) {
    if (!m || index >= m->file->n_tensors) return 0;
    return m->backend->device_ptr(m, index);
}

void wm_model_stats_get(const wm_model *m, wm_model_stats *out) {
    if (!out) return;
    wm_model_stats none = WM_MODEL_STATS_INIT;
    wm__struct_out(out, m ? &m->stats : &none, sizeof none, WM__MODEL_STATS_SIZE_1_0);
}

/* A chunk's memory starts dst_off bytes before any of its tensors (the backend's host pointer of
 * the first), so no backend needs a getter of its own. */
size_t wm_model_buffer_count(const wm_model *m) { return m ? m->n_chunks : 0; }

const void *wm_model_buffer_data(const wm_model *m, size_t index) {
    if (!m || index >= m->n_chunks || !m->chunks[index].count || !m->chunks[index].size)
        return NULL;
    uint32_t t = m->order[m->chunks[index].first];
    const char *p = m->backend->host_ptr(m, t);
    return p ? p - m->place[t].dst_off : NULL;
}

size_t wm_model_buffer_size(const wm_model *m, size_t index) {
    return m && index < m->n_chunks ? m->chunks[index].size : 0;
}

wm_status wm_model_cached(const wm_model *m, const void *at, size_t len, uint64_t *bytes) {
    if (!m || !at || !bytes ||
        (m->opts.mode != WM_MODE_MMAP && m->opts.mode != WM_MODE_MMAP_PRIVATE))
        return WM_EINVAL;
    uintptr_t a = (uintptr_t)at;
    uint64_t page = wm__os_page_size();
    for (size_t c = 0; c < m->n_chunks; c++) {
        uintptr_t base = (uintptr_t)wm_model_buffer_data(m, c);
        const wm__chunk *ch = &m->chunks[c];
        uint64_t room = (ch->size + page - 1) / page * page;
        if (!base || a < base || a - base > room || len > room - (a - base)) continue;
        if (len == 0) {
            *bytes = 0;
            return WM_OK;
        }
        int e = wm__os_cache_count(m->file->shards[ch->shard].fd, ch->file_start + (a - base), len,
                                   bytes);
        return e == ENOSYS ? WM_EUNSUPPORTED : e ? wm__status_io(e) : WM_OK;
    }
    return WM_EINVAL; /* not inside one buffer */
}

wm_status wm_model_tensor_buffer(const wm_model *m, size_t index, size_t *buffer,
                                 uint64_t *offset) {
    if (!m || !buffer || !offset) return WM_EINVAL;
    if (index >= m->file->n_tensors) return WM_ERANGE;
    *buffer = m->place[index].chunk;
    *offset = m->place[index].dst_off;
    return WM_OK;
}
