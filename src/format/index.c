/*
 * index.c: the name and key index of a wm_file: two open-addressing hash tables (tensor names,
 * metadata keys) built once after the parse, refusing duplicates, and the lookups the getters
 * and shards.c use. Both tables hold an entry's index + 1 (0 is an empty slot) and share one
 * probe loop; only the message for a duplicate differs between them.
 */
#include "../internal.h"

#include <string.h>

enum table { TENSORS, KEYS };

static uint32_t *slots(const wm_file *f, enum table t) {
    return t == TENSORS ? f->tensor_hash : f->kv_hash;
}

/* The name of entry i of table t (a tensor's name or a metadata key) in the names blob. */
static const char *entry_name(const wm_file *f, enum table t, size_t i, size_t *len) {
    if (t == TENSORS) {
        *len = f->tensors[i].name_len;
        return f->names + f->tensors[i].name_off;
    }
    *len = f->kvs[i].key_len;
    return f->names + f->kvs[i].key_off;
}

/* The slot of table t that holds `name`, or the empty slot where it would go. */
static size_t probe(const wm_file *f, enum table t, const char *name, size_t n) {
    const uint32_t *slot = slots(f, t);
    size_t mask = f->hash_cap - 1;
    for (size_t h = (size_t)wm__hash(name, n) & mask;; h = (h + 1) & mask) {
        if (!slot[h]) return h;
        size_t len;
        const char *s = entry_name(f, t, slot[h] - 1, &len);
        if (len == n && memcmp(s, name, n) == 0) return h;
    }
}

/* File offset of a value that lies in the header buffer (GGUF), for messages; 0 otherwise. */
static unsigned long long header_offset(const wm_file *f, const unsigned char *p) {
    uintptr_t a = (uintptr_t)p, h = (uintptr_t)f->header;
    return f->header && a >= h && a - h <= f->header_len ? (unsigned long long)(a - h) : 0;
}

/* Entry i of table t has the name entry j already has. */
static wm_status duplicate(const wm_file *f, enum table t, uint32_t j, size_t i, wm_error *err) {
    if (t == TENSORS)
        return wm__err(err, WM_EFORMAT, 0,
                       "%s: duplicate tensor name '%s' (tensors %u and %zu, data at offset "
                       "%llu and %llu)",
                       f->path, f->names + f->tensors[i].name_off, j, i,
                       (unsigned long long)f->tensors[j].offset,
                       (unsigned long long)f->tensors[i].offset);
    return wm__err(err, WM_EFORMAT, 0,
                   "%s: duplicate metadata key '%s' (entries %u and %zu, value at offset %llu)",
                   f->path, f->names + f->kvs[i].key_off, j, i, header_offset(f, f->kvs[i].val));
}

static wm_status insert_all(wm_file *f, enum table t, size_t count, wm_error *err) {
    uint32_t *slot = slots(f, t);
    for (size_t i = 0; i < count; i++) {
        size_t len;
        const char *name = entry_name(f, t, i, &len);
        size_t h = probe(f, t, name, len);
        if (slot[h]) return duplicate(f, t, slot[h] - 1, i, err);
        slot[h] = (uint32_t)i + 1;
    }
    return WM_OK;
}

wm_status wm__file_index(wm_file *f, wm_error *err) {
    size_t n = f->n_tensors > f->n_kv ? f->n_tensors : f->n_kv;
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    f->hash_cap = cap;
    f->tensor_hash = wm__calloc(cap, sizeof *f->tensor_hash);
    f->kv_hash = wm__calloc(cap, sizeof *f->kv_hash);
    if (!f->tensor_hash || !f->kv_hash)
        return wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the name index", f->path);
    wm_status st = insert_all(f, TENSORS, f->n_tensors, err);
    return st ? st : insert_all(f, KEYS, f->n_kv, err);
}

static wm_status find(const wm_file *f, enum table t, const char *name, size_t n, size_t *index) {
    uint32_t slot = slots(f, t)[probe(f, t, name, n)];
    if (!slot) return WM_ENOENT;
    *index = slot - 1;
    return WM_OK;
}

wm_status wm__index_find_tensor(const wm_file *f, const char *name, size_t n, size_t *index) {
    return find(f, TENSORS, name, n, index);
}

wm_status wm__index_find_kv(const wm_file *f, const char *key, size_t n, size_t *index) {
    return find(f, KEYS, key, n, index);
}
