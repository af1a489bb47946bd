/*
 * index.c: the name and key index of a wm_file: two open-addressing hash tables (tensor names,
 * metadata keys) built once after the parse, refusing duplicates, and the lookups the getters
 * and shards.c use.
 */
#include "../internal.h"

#include <string.h>

static size_t probe_start(const char *s, size_t n, size_t cap) {
    return (size_t)wm__hash(s, n) & (cap - 1);
}

/* File offset of a value that lies in the header buffer (GGUF), for messages; 0 otherwise. */
static unsigned long long header_offset(const wm_file *f, const unsigned char *p) {
    uintptr_t a = (uintptr_t)p, h = (uintptr_t)f->header;
    return f->header && a >= h && a - h <= f->header_len ? (unsigned long long)(a - h) : 0;
}

wm_status wm__file_index(wm_file *f, wm_error *err) {
    size_t n = f->n_tensors > f->n_kv ? f->n_tensors : f->n_kv;
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    f->hash_cap = cap;
    f->tensor_hash = wm__calloc(cap, sizeof *f->tensor_hash);
    f->kv_hash = wm__calloc(cap, sizeof *f->kv_hash);
    if (!f->tensor_hash || !f->kv_hash)
        return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the name index", f->path);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const wm__tensor *t = &f->tensors[i];
        const char *name = f->names + t->name_off;
        for (size_t h = probe_start(name, t->name_len, cap);; h = (h + 1) & (cap - 1)) {
            uint32_t slot = f->tensor_hash[h];
            if (!slot) {
                f->tensor_hash[h] = (uint32_t)i + 1;
                break;
            }
            const wm__tensor *o = &f->tensors[slot - 1];
            if (o->name_len == t->name_len && memcmp(f->names + o->name_off, name, t->name_len) == 0)
                return wm__err(err, WM_EFORMAT, 0,
                               "%s: duplicate tensor name '%s' (tensors %u and %zu, data at offset "
                               "%llu and %llu)",
                               f->path, name, slot - 1, i, (unsigned long long)o->offset,
                               (unsigned long long)t->offset);
        }
    }
    for (size_t i = 0; i < f->n_kv; i++) {
        const wm__kv *kv = &f->kvs[i];
        const char *key = f->names + kv->key_off;
        for (size_t h = probe_start(key, kv->key_len, cap);; h = (h + 1) & (cap - 1)) {
            uint32_t slot = f->kv_hash[h];
            if (!slot) {
                f->kv_hash[h] = (uint32_t)i + 1;
                break;
            }
            const wm__kv *o = &f->kvs[slot - 1];
            if (o->key_len == kv->key_len && memcmp(f->names + o->key_off, key, kv->key_len) == 0)
                return wm__err(err, WM_EFORMAT, 0,
                               "%s: duplicate metadata key '%s' (entries %u and %zu, value at offset "
                               "%llu)",
                               f->path, key, slot - 1, i, header_offset(f, kv->val));
        }
    }
    return WM_OK;
}

wm_status wm__index_find_tensor(const wm_file *f, const char *name, size_t n, size_t *index) {
    for (size_t h = probe_start(name, n, f->hash_cap);; h = (h + 1) & (f->hash_cap - 1)) {
        uint32_t slot = f->tensor_hash[h];
        if (!slot) return WM_ENOENT;
        const wm__tensor *t = &f->tensors[slot - 1];
        if (t->name_len == n && memcmp(f->names + t->name_off, name, n) == 0) {
            *index = slot - 1;
            return WM_OK;
        }
    }
}

wm_status wm__index_find_kv(const wm_file *f, const char *key, size_t n, size_t *index) {
    for (size_t h = probe_start(key, n, f->hash_cap);; h = (h + 1) & (f->hash_cap - 1)) {
        uint32_t slot = f->kv_hash[h];
        if (!slot) return WM_ENOENT;
        const wm__kv *kv = &f->kvs[slot - 1];
        if (kv->key_len == n && memcmp(f->names + kv->key_off, key, n) == 0) {
            *index = slot - 1;
            return WM_OK;
        }
    }
}
