/*
 * safetensors_index.c: the reader of a sharded checkpoint's index (*.safetensors.index.json):
 * weight_map (each tensor's shard file) and metadata (strings, exact integers, other numbers,
 * booleans; anything else kept as its compact JSON text), over json.h. shards.c reads the file
 * and checks the index against the shards.
 */
#include "json.h"

#include <string.h>

void wm__st_index_free(wm__st_index *ix) {
    if (!ix) return;
    wm__free(ix->blob);
    wm__free(ix->map);
    wm__free(ix->kvs);
    memset(ix, 0, sizeof *ix);
}

/* One "metadata" value: strings, integers (u64 or i64), other numbers (f64), booleans; anything
 * else is kept as its compact JSON text. Returns the blob offset; sets the kv's type and length. */
static size_t index_value(wm__gbuf *b, const cJSON *v, const wm__jnum *num, wm__kv *kv, bool *oom) {
    kv->length = 1;
    if (cJSON_IsString(v)) {
        kv->type = WM_VALUE_STRING;
        kv->length = strlen(v->valuestring);
        return wm__gput_str(b, v->valuestring);
    }
    if (cJSON_IsNumber(v)) {
        if (num && num->exact) {
            kv->type = WM_VALUE_U64;
            return wm__gput(b, &num->u, 8);
        }
        double d = v->valuedouble;
        if (d >= -9007199254740992.0 && d < 0 && d == (double)(int64_t)d) {
            int64_t i = (int64_t)d;
            kv->type = WM_VALUE_I64;
            return wm__gput(b, &i, 8);
        }
        kv->type = WM_VALUE_F64;
        return wm__gput(b, &d, 8);
    }
    if (cJSON_IsBool(v)) {
        unsigned char t = cJSON_IsTrue(v) ? 1 : 0;
        kv->type = WM_VALUE_BOOL;
        return wm__gput(b, &t, 1);
    }
    char *txt = wm__json_print(v); /* in the arena */
    if (!txt) {
        *oom = true;
        return 0;
    }
    kv->type = WM_VALUE_STRING;
    kv->length = strlen(txt);
    return wm__gput_str(b, txt);
}

wm_status wm__safetensors_index_parse(const char *path, const unsigned char *text, size_t len,
                                      wm__st_index *ix, wm_error *err) {
    memset(ix, 0, sizeof *ix);
    wm__jscan js = {0};
    cJSON *root = NULL;
    wm__gbuf b = {0};
    bool oom = false;
    wm__json_begin();
    wm_status st = wm__json_load(text, len, 0, path, &js, &root, err);
    if (st) goto fail;
    if (!cJSON_IsObject(root)) {
        st = wm__json_err(err, path, 0, "the index is a JSON %s, not an object",
                          wm__json_kind(root));
        goto fail;
    }
    const cJSON *wmap = NULL, *meta = NULL;
    for (const cJSON *m = root->child; m; m = m->next) {
        const cJSON **slot = !strcmp(m->string, "weight_map") ? &wmap
                             : !strcmp(m->string, "metadata") ? &meta
                                                              : NULL;
        if (!slot) continue;
        if (*slot) {
            st = wm__json_err(err, path, 0, "'%s' appears twice", m->string);
            goto fail;
        }
        *slot = m;
    }
    if (!wmap || !cJSON_IsObject(wmap)) {
        st = wm__json_err(err, path, 0, "the index has no weight_map object");
        goto fail;
    }
    if (meta && !cJSON_IsObject(meta) && !cJSON_IsNull(meta)) {
        st =
            wm__json_err(err, path, 0, "metadata is a JSON %s, not an object", wm__json_kind(meta));
        goto fail;
    }
    size_t n_map = 0, n_kv = 0;
    for (const cJSON *c = wmap->child; c; c = c->next)
        n_map++;
    if (meta && cJSON_IsObject(meta))
        for (const cJSON *c = meta->child; c; c = c->next)
            n_kv++;
    if ((n_map && !(ix->map = wm__calloc(n_map, sizeof *ix->map))) ||
        (n_kv && !(ix->kvs = wm__calloc(n_kv, sizeof *ix->kvs)))) {
        st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the index", path);
        goto fail;
    }
    wm__gput(&b, "", 1);
    /* Members in document order, so that the number cursor stays in step. */
    size_t mi = 0, ki = 0;
    for (const cJSON *m = root->child; m; m = m->next) {
        if (m == wmap) {
            for (const cJSON *c = m->child; c; c = c->next, mi++) {
                if (!cJSON_IsString(c) || !c->valuestring[0]) {
                    st = wm__json_err(err, path, 0,
                                      "weight_map: tensor '%s' maps to a JSON %s, not a file "
                                      "name",
                                      c->string,
                                      cJSON_IsString(c) ? "empty string" : wm__json_kind(c));
                    goto fail;
                }
                ix->map[mi][0] = (uint32_t)wm__gput_str(&b, c->string);
                ix->map[mi][1] = (uint32_t)wm__gput_str(&b, c->valuestring);
            }
        } else if (m == meta && n_kv) {
            for (const cJSON *c = m->child; c; c = c->next, ki++) {
                wm__kv *kv = &ix->kvs[ki];
                const wm__jnum *num = NULL;
                if (cJSON_IsNumber(c))
                    num = wm__json_take_num(&js);
                else
                    wm__json_skip_nums(&js, c);
                kv->key_off = (uint32_t)wm__gput_str(&b, c->string);
                kv->key_len = (uint32_t)strlen(c->string);
                kv->lenw = 8;
                kv->val = (const unsigned char *)(uintptr_t)index_value(&b, c, num, kv, &oom);
            }
        } else {
            wm__json_skip_nums(&js, m);
        }
    }
    if (oom || b.oom || b.len > UINT32_MAX) {
        st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the index", path);
        goto fail;
    }
    ix->blob = b.p;
    ix->blob_len = b.len;
    ix->n_map = n_map;
    ix->n_kv = n_kv;
    for (size_t i = 0; i < n_kv; i++)
        ix->kvs[i].val = (const unsigned char *)b.p + (uintptr_t)ix->kvs[i].val;
    wm__json_end();
    return WM_OK;
fail:
    wm__json_end();
    wm__free(b.p);
    wm__st_index_free(ix);
    return st;
}
