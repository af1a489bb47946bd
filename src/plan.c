/*
 * plan.c: the load plan (backend.h): which bytes of the file go where. Tensors are ordered by
 * (shard, offset); each gets its delivered type (conversion rules), its device (placement over
 * several devices), its slice (tensor parallelism), and a place in a chunk: a buffer of at most
 * max_buffer_size bytes that holds tensors of one shard and one device.
 *
 * Sections: order; delivered type; slices; placement; chunks.
 *
 * Why the plan packs heap and device tensors instead of mirroring the file: conversions and
 * slices change sizes, and a packed layout lets the reader pread each tensor (or slice) straight
 * into its final place, so heap mode never holds a second copy (peak = tensor bytes + the
 * conversion staging, bounded). Mapped layouts (the CPU backend's mmap modes) mirror the file:
 * a chunk is a page-aligned file range.
 */
#include "backend/backend.h"

#include <stdlib.h>
#include <string.h>

#define TENSOR_ALIGN 64 /* bytes: each tensor in a packed buffer starts on a cache line */

/* ---- order ---- */

typedef struct sort_key {
    uint32_t left_out; /* 1: not selected (sorted after every selected tensor) */
    uint32_t shard;
    uint64_t offset;
    uint32_t index;
} sort_key;

static int by_position(const void *a, const void *b) {
    const sort_key *x = a, *y = b;
    if (x->left_out != y->left_out) return x->left_out < y->left_out ? -1 : 1;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static wm_status order_tensors(wm_model *m, wm_error *err) {
    const wm_file *f = m->file;
    size_t n = f->n_tensors;
    sort_key *keys = wm__alloc(n * sizeof *keys);
    if (!keys) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the load plan", f->path);
    m->n_placed = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t out = m->place[i].chunk == WM__NOT_LOADED;
        keys[i] = (sort_key){out, f->tensors[i].shard, f->tensors[i].offset, (uint32_t)i};
        m->n_placed += !out;
    }
    qsort(keys, n, sizeof *keys, by_position);
    for (size_t i = 0; i < n; i++)
        m->order[i] = keys[i].index;
    wm__free(keys);
    return WM_OK;
}

/* ---- delivered type ---- */

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
            return wm__err(err, WM_EINVAL, 0, "%s: tensor '%s': converted size overflows", f->path,
                           name);
        p->type = rule->to;
        p->nbytes = bytes;
        p->convert = true;
        return WM_OK;
    }
    return WM_OK;
}

/* ---- slices ---- */

static void tensor_info(const wm_file *f, size_t i, wm_tensor_info *out) {
    const wm__tensor *t = &f->tensors[i];
    *out = (wm_tensor_info){.name = f->names + t->name_off,
                            .type = (wm_type)t->type,
                            .n_dims = t->n_dims,
                            .n_elements = t->n_elements,
                            .offset = t->offset,
                            .nbytes = t->nbytes,
                            .shard = t->shard};
    for (int d = 0; d < WM_MAX_DIMS; d++)
        out->shape[d] = t->ne[d];
}

wm_split wm_split_llama(void *user, size_t index, const wm_tensor_info *t) {
    static const char *const dim0[] = {"attn_q.", "attn_k.", "attn_v.", "ffn_gate.",  "ffn_up.",
                                       "q_proj.", "k_proj.", "v_proj.", "gate_proj.", "up_proj."};
    static const char *const last[] = {"attn_output.", "ffn_down.", "o_proj.", "down_proj."};
    (void)user;
    (void)index;
    if (!t || !t->name || t->n_dims != 2) return WM_SPLIT_NONE;
    for (size_t k = 0; k < sizeof dim0 / sizeof dim0[0]; k++)
        if (strstr(t->name, dim0[k])) return WM_SPLIT_DIM0;
    for (size_t k = 0; k < sizeof last / sizeof last[0]; k++)
        if (strstr(t->name, last[k])) return WM_SPLIT_LAST;
    return WM_SPLIT_NONE;
}

/* A selected row range [row_begin, row_end) of dim 0: one contiguous segment (model.c checked
 * the range). A 1-D tensor's rows are elements, in whole blocks. */
static void select_rows(const wm__tensor *t, const wm_tensor_select *s, wm__place *p) {
    uint32_t d = t->n_dims - 1;
    uint64_t rows = s->row_end - s->row_begin;
    wm_type type = (wm_type)t->type;
    uint64_t first, bytes;
    if (t->n_dims > 1) {
        uint64_t row = t->nbytes / t->ne[d];
        first = s->row_begin * row;
        bytes = rows * row;
    } else {
        uint64_t blk = wm_type_block_elems(type), bb = wm_type_block_bytes(type);
        first = s->row_begin / blk * bb;
        bytes = rows / blk * bb;
    }
    p->ne[d] = rows;
    p->src_off = first;
    p->seg_bytes = bytes;
    p->nbytes = bytes;
}

/* The whole tensor as one segment; then, under tensor parallelism, this rank's slice; under a
 * selection, nothing for a tensor left out and the rows asked for. */
static wm_status slice(const wm_file *f, size_t i, const wm_load_options *o,
                       const wm_tensor_select *sel, wm__place *p, wm_error *err) {
    const wm__tensor *t = &f->tensors[i];
    const char *name = f->names + t->name_off;
    p->n_dims = t->n_dims;
    for (int d = 0; d < WM_MAX_DIMS; d++)
        p->ne[d] = t->ne[d];
    p->split = WM_SPLIT_NONE;
    p->src_off = 0;
    p->rows = 1;
    p->src_stride = 0;
    p->seg_bytes = t->nbytes;
    p->dst_lo = 0;
    p->read_once = false;
    if (o->n_select && !sel) {
        p->chunk = WM__NOT_LOADED;
        p->rows = 0;
        p->seg_bytes = 0;
        p->nbytes = 0;
        return WM_OK;
    }
    if (sel && (sel->row_begin || sel->row_end)) {
        select_rows(t, sel, p);
        return WM_OK;
    }
    if (o->tp_world <= 1 || t->nbytes == 0) return WM_OK;
    wm_tensor_info info;
    tensor_info(f, i, &info);
    wm_split sp = o->tp_split ? o->tp_split(o->tp_user, i, &info) : WM_SPLIT_NONE;
    if (sp == WM_SPLIT_NONE && o->cuda->nccl_comm) {
        /* Read once: this rank reads its byte range of the whole tensor; the ranks' ranges
         * cover it and the backend completes it with broadcasts (read_once_range). */
        uint64_t lo, hi;
        wm__read_once_range(t->nbytes, o->tp_rank, o->tp_world, &lo, &hi);
        p->read_once = true;
        p->src_off = lo;
        p->dst_lo = lo;
        p->seg_bytes = hi - lo;
        p->rows = hi > lo;
        return WM_OK;
    }
    if (sp == WM_SPLIT_NONE) return WM_OK;
    if (sp != WM_SPLIT_DIM0 && sp != WM_SPLIT_LAST)
        return wm__err(err, WM_EINVAL, 0, "%s: tensor '%s': unknown split %d", f->path, name,
                       (int)sp);
    uint64_t w = o->tp_world, blk = wm_type_block_elems((wm_type)t->type);
    unsigned d = sp == WM_SPLIT_LAST || t->n_dims <= 1 ? 0 : t->n_dims - 1;
    uint64_t n = t->ne[d];
    /* The innermost dimension is cut in whole blocks of a quantized type. */
    if (n % w != 0 || (d == 0 && (n / w) % blk != 0))
        return wm__err(err, WM_EINVAL, 0,
                       "%s: tensor '%s': dimension %s (%llu) does not split into %llu equal "
                       "parts%s",
                       f->path, name, sp == WM_SPLIT_DIM0 ? "0" : "-1", (unsigned long long)n,
                       (unsigned long long)w, blk > 1 ? " of whole blocks" : "");
    p->split = sp;
    p->ne[d] = n / w;
    if (d == t->n_dims - 1 || t->n_dims <= 1) {
        /* The outermost dimension: one contiguous range. */
        p->seg_bytes = t->nbytes / w;
        p->src_off = o->tp_rank * p->seg_bytes;
    } else {
        /* The innermost: the rank's part of every row. */
        uint64_t row = t->ne[0] / blk * wm_type_block_bytes((wm_type)t->type);
        p->rows = t->nbytes / row;
        p->src_stride = row;
        p->seg_bytes = row / w;
        p->src_off = o->tp_rank * p->seg_bytes;
    }
    p->nbytes = p->rows * p->seg_bytes;
    return WM_OK;
}

void wm__read_once_range(uint64_t nbytes, unsigned rank, unsigned ranks, uint64_t *lo,
                         uint64_t *hi) {
    uint64_t part = nbytes / ranks;
    *lo = rank * part;
    *hi = rank + 1 == ranks ? nbytes : *lo + part;
}

/* ---- placement ---- */

/* The layer number in a tensor name ("blk.N.", "layers.N.", "h.N." at the start or after a
 * '.'), or -1. */
static long layer_of(const char *name) {
    static const char *const marks[] = {"blk.", "layers.", "h."};
    for (size_t k = 0; k < sizeof marks / sizeof marks[0]; k++) {
        size_t ml = strlen(marks[k]);
        for (const char *s = strstr(name, marks[k]); s; s = strstr(s + 1, marks[k])) {
            if (s != name && s[-1] != '.') continue;
            const char *q = s + ml;
            if (*q < '0' || *q > '9') continue;
            char *end;
            long v = strtol(q, &end, 10);
            if (*end == '.' || *end == 0) return v;
        }
    }
    return -1;
}

/* Sets place[i].device for every tensor (an index into opts.devices). */
static wm_status place_devices(wm_model *m, const wm_load_options *o, wm_error *err) {
    const wm_file *f = m->file;
    size_t n = f->n_tensors;
    unsigned nd = o->n_devices > 1 ? o->n_devices : 1;
    if (nd == 1) return WM_OK; /* calloc'd: device 0 */
    if (o->placement == WM_PLACE_CALLBACK) {
        for (size_t i = 0; i < n; i++) {
            wm_tensor_info info;
            tensor_info(f, i, &info);
            unsigned d = o->place_tensor(o->place_user, i, &info);
            if (d >= nd)
                return wm__err(err, WM_EINVAL, 0,
                               "%s: tensor '%s': place_tensor chose device index %u of %u", f->path,
                               info.name, d, nd);
            m->place[i].device = d;
        }
        return WM_OK;
    }
    if (o->placement == WM_PLACE_LAYERS) {
        long layers = 0;
        for (size_t i = 0; i < n; i++) {
            long l = layer_of(f->names + f->tensors[i].name_off);
            if (l + 1 > layers) layers = l + 1;
        }
        bool seen_layer = false;
        for (size_t k = 0; k < n; k++) {
            uint32_t i = m->order[k];
            long l = layer_of(f->names + f->tensors[i].name_off);
            seen_layer |= l >= 0;
            m->place[i].device = l >= 0       ? (unsigned)((uint64_t)l * nd / (uint64_t)layers)
                                 : seen_layer ? nd - 1
                                              : 0;
        }
        return WM_OK;
    }
    /* Balance: each tensor goes to the device whose share of the bytes its middle falls in. */
    uint64_t total = 0, before = 0;
    for (size_t i = 0; i < n; i++)
        total += m->place[i].nbytes;
    for (size_t k = 0; k < n && total; k++) {
        wm__place *p = &m->place[m->order[k]];
        uint64_t mid = before + p->nbytes / 2;
        unsigned d = (unsigned)((double)mid / (double)total * nd);
        p->device = d < nd ? d : nd - 1;
        before += p->nbytes;
    }
    return WM_OK;
}

/* ---- chunks ---- */

/* Mapped layouts mirror the file (chunks are page-aligned file ranges); packed layouts place
 * tensors one after another (heap and device memory). */
static bool mapped_layout(const wm_model *m) {
    return m->backend->maps_file && m->opts.mode != WM_MODE_HEAP;
}

/* The caller's device memory for tensor i (wm_cuda_options.dst): its address, which must not be
 * 0 (the backend checks that it is device memory). */
static wm_status caller_dst(wm_model *m, uint32_t i, wm__chunk *c, wm_error *err) {
    wm_tensor_info info;
    tensor_info(m->file, i, &info);
    c->ext = m->cuda.dst(m->cuda.dst_user, i, &info);
    if (!c->ext)
        return wm__err(err, WM_EINVAL, 0, "%s: tensor '%s': wm_cuda_options.dst gave address 0",
                       m->file->path, info.name);
    return WM_OK;
}

static wm_status build_chunks(wm_model *m, const wm_load_options *o, wm_error *err) {
    const wm_file *f = m->file;
    bool mapped = mapped_layout(m);
    /* the caller's memory: a chunk per tensor, each at the address the caller gives */
    bool ext = o->backend == WM_BACKEND_CUDA && m->cuda.dst;
    uint64_t max = o->max_buffer_size ? o->max_buffer_size : UINT64_MAX;
    uint64_t page = wm__os_page_size();
    wm__chunk *c = NULL;
    for (size_t k = 0; k < m->n_placed; k++) {
        uint32_t i = m->order[k];
        const wm__tensor *t = &f->tensors[i];
        wm__place *p = &m->place[i];
        uint64_t end = t->offset + t->nbytes;
        /* Would t fit in the open chunk? */
        bool fits = false;
        if (c && !ext && c->shard == t->shard && c->device == p->device) {
            uint64_t size =
                mapped ? end - c->file_start : wm__align_up(c->size, TENSOR_ALIGN) + p->nbytes;
            fits = size <= max;
            /* A selection maps the pages of its tensors, not the file between them. */
            if (mapped && m->n_placed < f->n_tensors && t->offset > c->file_end + page)
                fits = false;
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
            c->device = p->device;
            c->file_start = mapped ? t->offset / page * page : t->offset;
            c->file_end = t->offset;
            c->size = 0;
            c->first = (uint32_t)k;
            c->count = 0;
            c->ext = 0;
            if (ext && p->nbytes) {
                wm_status st = caller_dst(m, i, c, err);
                if (st) return st;
            }
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

wm_status wm__plan_build(wm_model *m, const wm_load_options *o, wm_error *err) {
    wm_file *f = m->file;
    size_t n = f->n_tensors;
    if (n == 0) return WM_OK;
    m->order = wm__alloc(n * sizeof *m->order);
    m->place = wm__calloc(n, sizeof *m->place);
    m->chunks = wm__calloc(n, sizeof *m->chunks); /* at most one chunk per tensor */
    const wm_tensor_select **sel = o->n_select ? wm__calloc(n, sizeof *sel) : NULL;
    if (!m->order || !m->place || !m->chunks || (o->n_select && !sel)) {
        wm__free(sel);
        return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the load plan", f->path);
    }
    for (size_t k = 0; k < o->n_select; k++) /* model.c checked the indices */
        sel[o->select[k].tensor] = &o->select[k];
    wm_status st = WM_OK;
    for (size_t i = 0; i < n && !st; i++) {
        if (!sel || sel[i]) st = target_type(f, &f->tensors[i], o, &m->place[i], err);
        /* tensor parallelism and row ranges never convert */
        if (!st) st = slice(f, i, o, sel ? sel[i] : NULL, &m->place[i], err);
    }
    wm__free(sel);
    if (!st) st = order_tensors(m, err); /* after slice(): the selected tensors first */
    if (!st) st = place_devices(m, o, err);
    if (!st) st = build_chunks(m, o, err);
    return st;
}
