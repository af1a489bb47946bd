/*
 * llama_pool.c: llama.cpp models in a wm_pool (weightmap_llama.h, "Pools"; docs/LLAMA.md,
 * "Models under a budget"). Public API only, of weightmap (its pool's objects of other libraries:
 * wm_pool_get_object) and of llama.cpp v0.4.0 and its ggml.
 *
 * The bridge is the pool's owner of llama models: the cost of a load before it runs
 * (wm_llama_cost, from the file's tensor table placed as the load would place it), the load
 * (wm_llama_load), the release (llama_model_free) and the counts the pool proves an eviction by:
 * the bytes of the bridge's own weight buffers alive in the process (llama_own.c counts them as
 * it maps and unmaps them; a mapped mode's mapping is the ledger's) and, per GPU, the device's
 * memory in use (total - free, ggml_backend_dev_memory). The pool key is the path with the
 * parameters and options that shape the model, as bytes: the same path with other parameters or
 * another load mode is another entry.
 *
 * Sections: options and key; the cost; the pool's owner; get and put.
 */
#include "llama_bridge.h"

#include <stdlib.h>
#include <string.h>

/* ---- options and key ---- */

/* The caller's options (NULL: defaults), as wm_llama_load reads them (its size: older, shorter
 * structs read as zeros past their end; a longer one only with zeros there). */
static wm_status read_options(const char *path, const wm_llama_options *opts, wm_llama_options *o,
                              wm_error *err) {
    memset(o, 0, sizeof *o);
    if (!opts) return WM_OK;
    uint32_t n;
    memcpy(&n, opts, sizeof n);
    if (n < sizeof n)
        return fail(err, WM_EINVAL, "%s: wm_llama_options: size %u is smaller than its size field",
                    path, n);
    for (size_t k = sizeof *o; k < n; k++)
        if (((const unsigned char *)opts)[k])
            return fail(err, WM_EINVAL,
                        "%s: wm_llama_options: size %u sets a field past the %zu bytes this bridge "
                        "knows (byte %zu)",
                        path, n, sizeof *o, k);
    memcpy(o, opts, n < sizeof *o ? n : sizeof *o);
    return WM_OK;
}

/* The fields of the parameters and options that shape the model (not threads, staging, trim or
 * progress: they change how it loads, not what it is). Zeroed whole, padding included. */
typedef struct key_head {
    int32_t n_gpu_layers, split_mode, load_mode, lazy_mode, main_gpu;
    int32_t repack, upload, buffers;
    uint8_t vocab_only, check_tensors, use_extra_bufts, no_host, no_alloc, load_mtp;
} key_head;

/* Appends n bytes at *at (buf NULL: counts only). */
static void put(unsigned char *buf, size_t *at, const void *p, size_t n) {
    if (buf && n) memcpy(buf + *at, p, n);
    *at += n;
}

/* The key of (params, options) into buf (NULL: its length only): the head, the devices, the
 * tensor split, the caller's buffer type overrides (pattern and type) and kv overrides. */
static size_t key_write(const struct llama_model_params *p, const wm_llama_options *o,
                        unsigned char *buf) {
    key_head h;
    memset(&h, 0, sizeof h);
    h.n_gpu_layers = p->n_gpu_layers;
    h.split_mode = (int32_t)p->split_mode;
    h.load_mode = o->load_mode ? (int32_t)o->load_mode - 2 : (int32_t)p->load_mode;
    h.lazy_mode = (int32_t)p->lazy_mode;
    h.main_gpu = p->main_gpu;
    h.repack = (int32_t)o->repack;
    h.upload = (int32_t)o->upload;
    h.buffers = (int32_t)o->buffers;
    h.vocab_only = p->vocab_only, h.check_tensors = p->check_tensors;
    h.use_extra_bufts = p->use_extra_bufts, h.no_host = p->no_host;
    h.no_alloc = p->no_alloc, h.load_mtp = p->load_mtp;
    size_t at = 0;
    put(buf, &at, &h, sizeof h);
    for (ggml_backend_dev_t *d = p->devices; d && *d; d++)
        put(buf, &at, d, sizeof *d);
    put(buf, &at, "D", 1);
    if (p->tensor_split) put(buf, &at, p->tensor_split, llama_max_devices() * sizeof(float));
    for (const struct llama_model_tensor_buft_override *v = p->tensor_buft_overrides;
         v && v->pattern; v++) {
        put(buf, &at, v->pattern, strlen(v->pattern) + 1);
        put(buf, &at, &v->buft, sizeof v->buft);
    }
    put(buf, &at, "O", 1);
    for (const struct llama_model_kv_override *v = p->kv_overrides; v && v->key[0]; v++) {
        size_t klen = strnlen(v->key, sizeof v->key);
        put(buf, &at, &v->tag, sizeof v->tag);
        put(buf, &at, v->key, klen + 1);
        if (v->tag == LLAMA_KV_OVERRIDE_TYPE_STR)
            put(buf, &at, v->val_str, strnlen(v->val_str, sizeof v->val_str));
        else if (v->tag == LLAMA_KV_OVERRIDE_TYPE_BOOL)
            put(buf, &at, &v->val_bool, sizeof v->val_bool);
        else
            put(buf, &at, &v->val_i64, sizeof v->val_i64); /* int and float alike: 8 bytes */
    }
    return at;
}

/* ---- the cost ---- */

#define MIB ((uint64_t)1 << 20)

/* Where the load's tensors go, by bytes. */
typedef struct placed {
    uint64_t cpu;              /* the plain CPU buffer (file bytes, padded) */
    uint64_t extra[MAX_EXTRA]; /* each extra (repack) buffer type: its alloc sizes */
    uint64_t extra_largest;    /* the largest repacked tensor (WHOLE's window) */
    uint64_t device;           /* layers offloaded to the GPU(s) */
    uint64_t fill;             /* what llama.cpp may create that the file lacks (bound) */
    bool windowed;             /* a tensor goes through the window */
} placed;

static uint64_t pad(uint64_t n, uint64_t a) { return a ? (n + a - 1) / a * a : n; }

/* The layer of a tensor name "blk.N...." (-1: not a layer's). */
static long layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long n = strtol(name + 4, &end, 10);
    return end != name + 4 && *end == '.' ? n : -1;
}

/* Whether layer il (n_layer: the output's) sits on a GPU, as llama.cpp v0.4.0 places it
 * (llama-model.cpp: i_gpu_start = n_layer + 1 - n_gpu_layers; a negative n_gpu_layers: all). */
static bool on_gpu(const struct llama_model_params *p, long il, long n_layer, bool cpu) {
    if (cpu || il < 0) return false; /* the input layer (token_embd) stays on the CPU */
    long ngl = p->n_gpu_layers < 0 ? n_layer + 1 : p->n_gpu_layers;
    return il >= n_layer + 1 - ngl;
}

/* One tensor's bytes (ti, as `name`) where the load would put it. */
static void place_one(const struct llama_model_params *p, const wm_llama_options *o,
                      const extras *x, const wm_file *f, size_t i, const char *name,
                      const wm_tensor_info *ti, long n_layer, placed *pl) {
    long il = layer_of(name);
    if (il < 0 && strcmp(name, "token_embd.weight") != 0) il = n_layer; /* the output layer's */
    if (on_gpu(p, il, n_layer, wm__llama_runs_on_cpu(p))) {
        pl->device += ti->nbytes;
        pl->windowed |= o->upload != WM_LLAMA_UPLOAD_AUTO;
        return;
    }
    int k = x->n ? wm__llama_extra_for(x, f, i, name) : -1;
    if (k < 0) {
        pl->cpu += pad(ti->nbytes, 64);
        pl->windowed |= o->upload == WM_LLAMA_UPLOAD_WINDOW;
        return;
    }
    struct ggml_init_params ip = {.mem_size = ggml_tensor_overhead() * 2, .no_alloc = true};
    struct ggml_context *ctx = ggml_init(ip);
    uint64_t size = ti->nbytes;
    if (ctx) {
        int64_t ne[GGML_MAX_DIMS];
        for (int d = 0; d < GGML_MAX_DIMS; d++)
            ne[d] = (int64_t)ti->shape[d];
        struct ggml_tensor *t = ggml_new_tensor(ctx, (enum ggml_type)ti->type, GGML_MAX_DIMS, ne);
        size_t a = ggml_backend_buft_get_alloc_size(x->buft[k], t);
        if (a > size) size = a;
        ggml_free(ctx);
    }
    size = pad(size, ggml_backend_buft_get_alignment(x->buft[k]));
    pl->extra[k] += size;
    if (size > pl->extra_largest) pl->extra_largest = size;
    pl->windowed = true; /* a repack buffer takes its bytes through ggml_backend_tensor_set */
}

/* Every tensor of f placed, with the output head a tied model gets as a copy of token_embd, and
 * the bound of what llama.cpp creates that the file lacks: a bias of f32 per matrix's row count
 * (every optional bias of a llama-family layer belongs to a matrix) and 64 KiB of rope factors. */
static void place_all(const struct llama_model_params *p, const wm_llama_options *o,
                      const wm_file *f, placed *pl) {
    extras x;
    memset(&x, 0, sizeof x);
    if (wm__llama_runs_on_cpu(p) && p->use_extra_bufts && o->repack != WM_LLAMA_REPACK_OFF)
        wm__llama_cpu_extras(&x);
    size_t nt = wm_file_tensor_count(f), e;
    long n_layer = 0;
    for (size_t i = 0; i < nt; i++) {
        wm_tensor_info ti;
        wm_file_tensor(f, i, &ti);
        if (layer_of(ti.name) + 1 > n_layer) n_layer = layer_of(ti.name) + 1;
    }
    pl->fill = 64 << 10;
    for (size_t i = 0; i < nt; i++) {
        wm_tensor_info ti;
        wm_file_tensor(f, i, &ti);
        place_one(p, o, &x, f, i, ti.name, &ti, n_layer, pl);
        if (ti.n_dims == 2) pl->fill += pad(ti.shape[1] * 4, 64);
    }
    if (wm_file_find_tensor(f, "output.weight", &e) != WM_OK &&
        wm_file_find_tensor(f, "token_embd.weight", &e) == WM_OK) {
        wm_tensor_info ti;
        wm_file_tensor(f, e, &ti);
        place_one(p, o, &x, f, e, "output.weight", &ti, n_layer, pl);
    }
}

/* The GPU devices (ggml's registry order: CUDA0, CUDA1...) the model may use, as a mask. */
static unsigned gpu_mask(const struct llama_model_params *p) {
    unsigned mask = 0, n = 0;
    for (size_t i = 0; i < ggml_backend_dev_count() && n < WM_LEDGER_DEVICES; i++) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        if (ggml_backend_dev_type(d) != GGML_BACKEND_DEVICE_TYPE_GPU) continue;
        bool listed = !p->devices;
        for (ggml_backend_dev_t *l = p->devices; l && *l; l++)
            listed |= *l == d;
        if (p->split_mode == LLAMA_SPLIT_MODE_NONE) listed = (int)n == p->main_gpu;
        if (listed) mask |= 1u << n;
        n++;
    }
    return mask;
}

/* What the reading engine adds at the load's peak beside the weights (its staging, stacks and
 * tables, by the library's own plan of a heap load of f), and the ledger's share of it. */
static wm_status reader_cost(wm_file *f, const wm_llama_options *o, wm_cost *rc, wm_error *err) {
    wm_load_options lo = WM_LOAD_OPTIONS_INIT;
    lo.mode = WM_MODE_HEAP;
    lo.threads = o->threads;
    lo.direct_io = o->direct_io;
    return wm_model_cost(f, &lo, rc, err);
}

/* The kinds of the cost from where the tensors go (see wm_llama_cost). */
static void fill_cost(const struct llama_model_params *p, const wm_llama_options *o, int mode,
                      const placed *pl, const wm_cost *map, const wm_cost *rc, uint64_t opened,
                      uint64_t header, uint64_t tensor_bytes, wm_cost *c) {
    bool maps = wm__llama_mode_maps(mode);
    uint64_t rep = 0, types = 1;
    for (size_t k = 0; k < MAX_EXTRA; k++)
        rep += pl->extra[k], types += pl->extra[k] != 0;
    uint64_t own_over = types * (3 * 4096 + GRID); /* header page, rounding, the start's shift */
    uint64_t weights = (maps ? 0 : pl->cpu) + rep + pl->fill + own_over;
    uint64_t shared = maps ? map->loaded.file_shared : 0;
    uint64_t stage = 0;
    for (int k = 0; k < WM_LEDGER_COUNT; k++)
        if (k == WM_LEDGER_HEAP || k == WM_LEDGER_SCRATCH)
            stage += rc->ledger_peak[k] > rc->ledger_loaded[k]
                         ? rc->ledger_peak[k] - rc->ledger_loaded[k]
                         : 0;
    /* the reader's window: all threads together, at most 8 MiB a thread (wm_read_options); a
     * tensor handed over whole has one of its size, two at most at once */
    uint64_t window = o->window ? o->window : 64 * MIB, shares = (uint64_t)rc->threads * 8 * MIB;
    window = pl->windowed ? (window < shares ? window : shares) : 0;
    if (o->repack == WM_LLAMA_REPACK_WHOLE) window += 2 * pl->extra_largest;
    uint64_t most = tensor_bytes / 4 < 256 * MIB ? tensor_bytes / 4 : 256 * MIB;
    uint64_t prefetch =
        !maps && o->prefetch == WM_LLAMA_PREFETCH_AUTO && o->direct_io != WM_DIRECT_OFF ? most : 0;
    c->loaded.anonymous = weights + header; /* header: llama.cpp's vocabulary, estimated */
    c->loaded.file_shared = shared;
    c->peak.anonymous = weights + 2 * header + opened + stage + window + prefetch;
    c->peak.file_shared = shared;
    if (wm__llama_mode_locks(mode)) {
        c->loaded.locked = c->peak.locked = (maps ? shared : pl->cpu) + rep;
    }
    c->loaded.device = c->peak.device = pl->device;
    unsigned mask = pl->device ? gpu_mask(p) : 0;
    for (int d = 0; d < WM_LEDGER_DEVICES; d++)
        if (mask & (1u << d)) c->device_peak[d] = c->device_loaded[d] = pl->device;
    c->host_peak = c->peak.anonymous + c->peak.file_shared;
    c->host_loaded = c->loaded.anonymous + c->loaded.file_shared;
    c->host_needed = c->peak.anonymous + (c->peak.locked > rep ? c->peak.locked - rep : 0);
    c->ledger_loaded[WM_LEDGER_MAP_SHARED] = c->ledger_peak[WM_LEDGER_MAP_SHARED] = shared;
    c->ledger_peak[WM_LEDGER_HEAP] = opened + stage;
    c->ledger_peak[WM_LEDGER_SCRATCH] = prefetch;
    c->threads = rc->threads;
}

/* The mode the load of f will use: a mapped mode where this load can map the file (its CPU
 * buffers the bridge's own), as wm_llama_load decides; AUTO falls back to NONE as the load does,
 * an explicit mapped mode is refused naming why. */
static wm_status mode_used(const wm_file *f, const struct llama_model_params *p,
                           const wm_llama_options *o, int asked, int *mode, wm_error *err) {
    char buf[200];
    int cpu_layers;
    const char *why = wm__llama_mode_maps(*mode)
                          ? wm__llama_cannot_map(f, p, o, &cpu_layers, buf, sizeof buf)
                          : NULL;
    if (!why) return WM_OK;
    if (asked == LLAMA_LOAD_MODE_AUTO) {
        *mode = LLAMA_LOAD_MODE_NONE;
        return WM_OK;
    }
    return fail(err, WM_EUNSUPPORTED, "%s: load_mode %s: the bridge cannot map here (%s)",
                wm_file_path(f), *mode == LLAMA_LOAD_MODE_MMAP ? "MMAP" : "MMAP_MLOCK", why);
}

/* The cost of the file f's load with p and o in mode (resolved); `opened`: what f's open holds. */
static wm_status cost_of(wm_file *f, const struct llama_model_params *p, const wm_llama_options *o,
                         int mode, uint64_t opened, wm_cost *c, wm_error *err) {
    wm_cost rc = WM_COST_INIT, map = WM_COST_INIT;
    wm_status st = reader_cost(f, o, &rc, err);
    if (!st && wm__llama_mode_maps(mode)) {
        wm_load_options lo = WM_LOAD_OPTIONS_INIT;
        lo.mode = WM_MODE_MMAP;
        st = wm_model_cost(f, &lo, &map, err);
    }
    if (st) return st;
    placed pl;
    memset(&pl, 0, sizeof pl);
    place_all(p, o, f, &pl);
    fill_cost(p, o, mode, &pl, &map, &rc, opened, wm_file_data_offset(f), wm_file_tensor_bytes(f),
              c);
    return WM_OK;
}

wm_status wm_llama_cost(const char *path, const struct llama_model_params *params,
                        const wm_llama_options *opts, wm_cost *out, wm_error *err) {
    if (!path || !out) return fail(err, WM_EINVAL, "wm_llama_cost: NULL path or out");
    if (out->size != 0 && out->size < sizeof(uint32_t))
        return fail(err, WM_EINVAL, "%s: wm_llama_cost: wm_cost size %u", path, out->size);
    wm_llama_options o;
    wm_status st = read_options(path, opts, &o, err);
    if (st) return st;
    struct llama_model_params p = params ? *params : llama_model_default_params();
    int asked, mode;
    st = wm__llama_mode(path, &p, o.load_mode, &asked, &mode, err);
    if (st) return st;
    wm_ledger l0 = WM_LEDGER_INIT, l1 = WM_LEDGER_INIT;
    wm_ledger_get(&l0);
    wm_file *f = NULL;
    st = wm_file_open_set(path, &f, err);
    if (st) return st;
    wm_ledger_get(&l1);
    uint64_t opened = wm_ledger_bytes(&l1) > wm_ledger_bytes(&l0)
                          ? wm_ledger_bytes(&l1) - wm_ledger_bytes(&l0)
                          : 0;
    wm_cost c = WM_COST_INIT;
    st = mode_used(f, &p, &o, asked, &mode, err);
    if (!st) st = cost_of(f, &p, &o, mode, opened, &c, err);
    wm_file_close(f);
    if (st) return st;
    uint32_t n = out->size ? out->size : (uint32_t)sizeof c;
    memcpy((char *)out + sizeof n, (char *)&c + sizeof n, (n < sizeof c ? n : sizeof c) - sizeof n);
    return WM_OK;
}

/* ---- the pool's owner ---- */

typedef struct get_args {
    const struct llama_model_params *params;
    const wm_llama_options *opts;
} get_args;

static wm_status owner_cost(void *args, const char *path, wm_cost *out, wm_error *err) {
    const get_args *a = args;
    return wm_llama_cost(path, a->params, a->opts, out, err);
}

static wm_status owner_load(void *args, const char *path, void **object, wm_error *err) {
    const get_args *a = args;
    struct llama_model *m = NULL;
    wm_status st = wm_llama_load(path, a->params, a->opts, &m, err);
    if (!st) *object = m;
    return st;
}

static void owner_release(void *object) { llama_model_free(object); }

/* The bridge's own buffers alive, and each GPU's memory in use (its numbering: gpu_mask's). */
static void owner_count(wm_pool_counts *c) {
    c->host = wm__llama_own_bytes();
    int n = 0;
    for (size_t i = 0; i < ggml_backend_dev_count() && n < WM_LEDGER_DEVICES; i++) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        if (ggml_backend_dev_type(d) != GGML_BACKEND_DEVICE_TYPE_GPU) continue;
        size_t free = 0, total = 0;
        ggml_backend_dev_memory(d, &free, &total);
        c->device[n++] = total > free ? total - free : 0;
    }
}

static const wm_pool_owner llama_owner = {.size = sizeof(wm_pool_owner),
                                          .name = "llama.cpp",
                                          .cost = owner_cost,
                                          .load = owner_load,
                                          .release = owner_release,
                                          .count = owner_count};

/* ---- get and put ---- */

wm_status wm_llama_pool_get(wm_pool *pool, const char *path,
                            const struct llama_model_params *params, const wm_llama_options *opts,
                            struct llama_model **out, wm_error *err) {
    if (out) *out = NULL;
    if (!pool || !path || !out)
        return fail(err, WM_EINVAL, "wm_llama_pool_get: NULL pool, path or out");
    wm_llama_options o;
    wm_status st = read_options(path, opts, &o, err);
    if (st) return st;
    struct llama_model_params p = params ? *params : llama_model_default_params();
    size_t len = key_write(&p, &o, NULL);
    unsigned char *key = wm__llama_pages(len);
    if (!key) return fail(err, WM_ENOMEM, "%s: out of memory for the pool's key", path);
    key_write(&p, &o, key);
    get_args a = {.params = &p, .opts = opts};
    void *m = NULL;
    st = wm_pool_get_object(pool, path, &llama_owner, key, len, &a, &m, err);
    wm__llama_pages_free(key, len);
    if (!st) *out = m;
    return st;
}

wm_status wm_llama_pool_put(wm_pool *pool, struct llama_model *model, wm_error *err) {
    return wm_pool_put_object(pool, model, err);
}
