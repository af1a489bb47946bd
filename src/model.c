/*
 * model.c: the lifecycle of a loaded model: the options every backend shares, the load plan,
 * load and release through the backend table (backends.c), and the getters. The host-side
 * tools backends load with (regions, locking, the parallel reader) are in backend/host.c.
 *
 * Sections: names; options and the plan; load and release; getters.
 *
 * Why the plan packs heap tensors instead of mirroring the file: conversions change sizes, and a
 * packed layout lets the reader pread each tensor straight into its final place, so heap mode
 * never holds a second copy (peak = tensor bytes + the conversion staging, bounded).
 */
#include "backend/backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TENSOR_ALIGN 64 /* bytes: each tensor in a packed buffer starts on a cache line */

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

/* ---- options and the plan ---- */

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
        return wm__err(err, WM_EINVAL, 0, "%s: conversion on load needs mode heap (mode %s)",
                       path, wm_mode_name(o->mode));
    if (o->max_buffer_size && o->max_buffer_size < wm__os_page_size())
        return wm__err(err, WM_EINVAL, 0, "%s: max_buffer_size %llu is below the page size", path,
                       (unsigned long long)o->max_buffer_size);
    return be->check ? be->check(f, o, err) : WM_OK;
}

typedef struct sort_key {
    uint32_t shard;
    uint64_t offset;
    uint32_t index;
} sort_key;

static int by_position(const void *a, const void *b) {
    const sort_key *x = a, *y = b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The delivered type of tensor t under the conversion rules. */
static wm_status target_type(const wm_file *f, const wm__tensor *t, const wm_load_options *o,
                             wm__place *p, wm_error *err) {
    const char *name = f->names + t->name_off;
    p->type = (wm_type)t->type;
    p->nbytes = t->nbytes;
    p->convert = false;
    for (size_t r = 0; r < o->n_convert; r++) {
        const wm_convert_rule *rule = &o->convert[r];
        if (rule->tensor && strcmp(rule->tensor, name) != 0) continue;
        if (rule->from != WM_TYPE_INVALID && rule->from != (wm_type)t->type) continue;
        if (rule->to == (wm_type)t->type) return WM_OK;
        if (!wm_convert_supported((wm_type)t->type, rule->to))
            return wm__err(err, WM_EINVAL, 0, "%s: tensor '%s': no conversion from %s to %s",
                           f->path, name, wm_type_name((wm_type)t->type),
                           wm_type_name(rule->to) ? wm_type_name(rule->to) : "?");
        uint64_t bytes;
        if (wm__mul_overflow_u64(t->n_elements / wm_type_block_elems(rule->to),
                                 wm_type_block_bytes(rule->to), &bytes))
            return wm__err(err, WM_EINVAL, 0, "%s: tensor '%s': converted size overflows",
                           f->path, name);
        p->type = rule->to;
        p->nbytes = bytes;
        p->convert = true;
        return WM_OK;
    }
    return WM_OK;
}

/* Mapped layouts mirror the file (chunks are page-aligned file ranges); packed layouts place
 * tensors one after another (heap and device memory). */
static bool mapped_layout(const wm_model *m) {
    return m->backend->maps_file && m->opts.mode != WM_MODE_HEAP;
}

static wm_status build_plan(wm_model *m, const wm_load_options *o, wm_error *err) {
    wm_file *f = m->file;
    size_t n = f->n_tensors;
    if (n == 0) return WM_OK;
    sort_key *keys = wm__alloc(n * sizeof *keys);
    m->order = wm__alloc(n * sizeof *m->order);
    m->place = wm__calloc(n, sizeof *m->place);
    m->chunks = wm__calloc(n, sizeof *m->chunks); /* at most one chunk per tensor */
    if (!keys || !m->order || !m->place || !m->chunks) {
        wm__free(keys);
        return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the load plan", f->path);
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = (sort_key){f->tensors[i].shard, f->tensors[i].offset, (uint32_t)i};
    qsort(keys, n, sizeof *keys, by_position);
    for (size_t i = 0; i < n; i++) m->order[i] = keys[i].index;
    wm__free(keys);

    bool mapped = mapped_layout(m);
    uint64_t max = o->max_buffer_size ? o->max_buffer_size : UINT64_MAX;
    uint64_t page = wm__os_page_size();
    wm__chunk *c = NULL;
    for (size_t k = 0; k < n; k++) {
        uint32_t i = m->order[k];
        const wm__tensor *t = &f->tensors[i];
        wm__place *p = &m->place[i];
        wm_status st = target_type(f, t, o, p, err);
        if (st) return st;
        uint64_t end = t->offset + t->nbytes;
        /* Would t fit in the open chunk? */
        bool fits = false;
        if (c && c->shard == t->shard) {
            uint64_t size = mapped ? end - c->file_start
                                   : wm__align_up(c->size, TENSOR_ALIGN) + p->nbytes;
            fits = size <= max;
        }
        if (!fits) {
            uint64_t own = mapped ? end - t->offset / page * page : p->nbytes;
            if (own > max)
                return wm__err(err, WM_EINVAL, 0,
                               "%s: tensor '%s' needs %llu bytes, more than max_buffer_size %llu",
                               f->path, f->names + t->name_off, (unsigned long long)own,
                               (unsigned long long)max);
            c = &m->chunks[m->n_chunks++];
            c->shard = t->shard;
            c->file_start = mapped ? t->offset / page * page : t->offset;
            c->file_end = t->offset;
            c->size = 0;
            c->first = (uint32_t)k;
            c->count = 0;
        }
        p->chunk = (uint32_t)(c - m->chunks);
        if (mapped) {
            p->dst_off = (size_t)(t->offset - c->file_start);
            if (end > c->file_end) c->file_end = end;
            c->size = (size_t)(c->file_end - c->file_start);
        } else {
            p->dst_off = c->count ? (size_t)wm__align_up(c->size, TENSOR_ALIGN) : 0;
            c->size = p->dst_off + (size_t)p->nbytes;
            if (end > c->file_end) c->file_end = end;
        }
        c->count++;
        m->stats.tensor_bytes += p->nbytes;
    }
    m->stats.buffers = m->n_chunks;
    return WM_OK;
}

/* ---- load and release ---- */

static void model_free(wm_model *m) {
    if (!m) return;
    m->backend->release(m); /* accepts a model it never loaded (bctx NULL) */
    wm__free(m->order);
    wm__free(m->place);
    wm__free(m->chunks);
    wm_file *f = m->file;
    wm__free(m);
    wm__file_unref(f);
}

void wm_model_release(wm_model *m) { model_free(m); }

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

wm_status wm_model_load(wm_file *file, const wm_load_options *opts, wm_model **out,
                        wm_error *err) {
    if (out) *out = NULL;
    if (!file || !opts || !out)
        return wm__err(err, WM_EINVAL, 0, "wm_model_load: NULL file, options or out");
    const wm__backend *be;
    wm_status st = wm__backend_get(opts->backend, file->path, &be, err);
    if (st) return st;
    st = check_options(file, be, opts, err);
    if (st) return st;
    double t0 = wm__os_now();
    wm_model *m = wm__calloc(1, sizeof *m);
    if (!m) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", file->path);
    m->file = wm__file_ref(file);
    m->backend = be;
    m->opts = *opts;
    m->opts.convert = NULL;
    m->opts.n_convert = 0;

    st = check_unchanged(file, err);
    if (st) goto fail;
    st = build_plan(m, opts, err);
    if (st) goto fail;
    st = be->load(m, err);
    if (st) goto fail;
    m->stats.load_seconds = wm__os_now() - t0;
    *out = m;
    return WM_OK;
fail:
    model_free(m);
    return st;
}

/* ---- getters ---- */

const wm_file *wm_model_file(const wm_model *m) { return m ? m->file : NULL; }
wm_mode wm_model_mode(const wm_model *m) { return m ? m->opts.mode : WM_MODE_NONE; }

wm_status wm_model_tensor_info(const wm_model *m, size_t index, wm_type *type, uint64_t *nbytes) {
    if (!m) return WM_EINVAL;
    if (index >= m->file->n_tensors) return WM_ERANGE;
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

uint64_t wm_model_tensor_device_ptr(const wm_model *m, size_t index) {
    if (!m || index >= m->file->n_tensors) return 0;
    return m->backend->device_ptr(m, index);
}

void wm_model_stats_get(const wm_model *m, wm_model_stats *out) {
    if (!m || !out) return;
    *out = m->stats;
}
