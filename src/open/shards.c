/*
 * shards.c: sets of files opened as one wm_file: sharded safetensors checkpoints (an index
 * NAME.safetensors.index.json whose weight_map names the shard of every tensor, or shards named
 * NAME-0000K-of-0000N.safetensors), GGUF split sets (NAME-0000K-of-0000N.gguf carrying
 * split.no, split.count and split.tensors.count) and explicit lists of files.
 *
 * Which paths open a set: an index always does (wm_file_open); a shard's or a part's name does
 * only when the whole set is asked for (wm_file_open_set), since a path to one shard is that
 * shard (safetensors' rule: a consumer's loop over the shards must hold each byte once); a list
 * is a set by being one (wm_file_open_paths).
 *
 * Sections: shard names (recognising them, building sibling paths); reading the index; merging
 * parsed shards into one file (each shard keeps its own descriptor, tensors say their shard);
 * safetensors sets; GGUF split sets; explicit lists; the entry points.
 *
 * Every shard is parsed as a file of its own by wm__file_open_one, so each gets the full checks
 * of its format; the set checks come on top: every shard present and of the right kind, no
 * tensor in two shards, no file twice, and the index or the split keys agreeing with what the
 * shards hold.
 */
#include "open.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SHARDS 65535u            /* split.count is a u16 in llama.cpp */
#define MAX_INDEX_BYTES 100000000ull /* largest index file read */
#define ST_EXT ".safetensors"
#define ST_INDEX_EXT ".safetensors.index.json"

/* ---- shard names ---- */

typedef struct shard_name {
    size_t prefix_len; /* bytes of the path before "-0000K-of-0000N" */
    unsigned k, n;     /* this shard (1-based) and the count */
    int wk, wn;        /* digits written for each */
    const char *ext;
} shard_name;

static bool digits_before(const char *p, size_t end, size_t *start, unsigned *val) {
    size_t i = end;
    while (i > 0 && p[i - 1] >= '0' && p[i - 1] <= '9')
        i--;
    if (i == end || end - i > 9) return false;
    unsigned v = 0;
    for (size_t j = i; j < end; j++)
        v = v * 10 + (unsigned)(p[j] - '0');
    *start = i;
    *val = v;
    return true;
}

/* True when path ends in "-<digits>-of-<digits>" + ext. */
static bool parse_shard_name(const char *path, const char *ext, shard_name *out) {
    size_t n = strlen(path), el = strlen(ext);
    if (n < el || strcmp(path + n - el, ext) != 0) return false;
    size_t j, i;
    unsigned count, k;
    if (!digits_before(path, n - el, &j, &count)) return false;
    if (j < 4 || memcmp(path + j - 4, "-of-", 4) != 0) return false;
    if (!digits_before(path, j - 4, &i, &k)) return false;
    if (i < 1 || path[i - 1] != '-') return false;
    *out = (shard_name){i - 1, k, count, (int)(j - 4 - i), (int)(n - el - j), ext};
    return true;
}

static char *sibling_path(const char *path, const shard_name *sn, unsigned k) {
    size_t cap = sn->prefix_len + strlen(sn->ext) + 48;
    char *p = wm__alloc(cap);
    if (p)
        snprintf(p, cap, "%.*s-%0*u-of-%0*u%s", (int)sn->prefix_len, path, sn->wk, k, sn->wn, sn->n,
                 sn->ext);
    return p;
}

/* ---- reading the index ---- */

static wm_status read_index(const char *path, wm__st_index *ix, wm_error *err) {
    int fd = -1;
    unsigned char *text = NULL;
    wm_os_stat stt;
    wm_status st;
    int e = wm__os_open_read(path, &fd);
    if (e)
        return wm__err(err, wm__status_from_errno(e), e, "%s: cannot open: %s", path,
                       wm__errno_text(e));
    e = wm__os_stat(fd, &stt);
    if (e) {
        st = wm__err(err, wm__status_io(e), e, "%s: cannot stat: %s", path, wm__errno_text(e));
        goto done;
    }
    if (!stt.is_regular) {
        st = wm__err(err, WM_EINVAL, 0, "%s: not a regular file", path);
        goto done;
    }
    if (stt.size > MAX_INDEX_BYTES) {
        st = wm__err(err, WM_EFORMAT, 0,
                     "%s: at offset 0: an index of %llu bytes is more than the "
                     "limit of %llu",
                     path, (unsigned long long)stt.size, MAX_INDEX_BYTES);
        goto done;
    }
    text = wm__alloc(stt.size ? (size_t)stt.size : 1);
    if (!text) {
        st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory for the index", path);
        goto done;
    }
    size_t got;
    e = wm__os_pread(fd, text, (size_t)stt.size, 0, &got);
    if (e) {
        st = wm__err(err, wm__status_io(e), e, "%s: reading at offset 0: %s", path,
                     wm__errno_text(e));
        goto done;
    }
    if (got != stt.size) {
        st = wm__err(err, WM_EIO, 0, "%s: file shrank while reading it", path);
        goto done;
    }
    st = wm__safetensors_index_parse(path, text, (size_t)stt.size, ix, err);
done:
    wm__free(text);
    wm__os_close(fd);
    return st;
}

/* ---- merging ---- */

typedef struct set {
    const char *path; /* as the caller gave it */
    wm_error *err;
    wm_file **sub; /* each shard parsed on its own */
    uint32_t n;
    wm__st_index ix; /* safetensors index, when there is one */
    bool have_ix;
} set;

typedef struct tref {
    const char *name;
    uint32_t shard;
} tref;

static int by_name(const void *a, const void *b) {
    const tref *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->shard > y->shard) - (x->shard < y->shard);
}

static const char *tname(const wm_file *f, size_t i) { return f->names + f->tensors[i].name_off; }

/* No tensor may be in two shards (each shard refused its own duplicates already). */
static wm_status check_unique(set *s, size_t total) {
    if (!total) return WM_OK;
    tref *r = wm__alloc(total * sizeof *r);
    if (!r) return wm__err(s->err, WM_ENOMEM, 0, "%s: out of memory", s->path);
    size_t k = 0;
    for (uint32_t i = 0; i < s->n; i++)
        for (size_t j = 0; j < s->sub[i]->n_tensors; j++)
            r[k++] = (tref){tname(s->sub[i], j), i};
    qsort(r, total, sizeof *r, by_name);
    wm_status st = WM_OK;
    for (size_t i = 1; i < total && !st; i++)
        if (!strcmp(r[i - 1].name, r[i].name))
            st =
                wm__err(s->err, WM_EFORMAT, 0, "%s: tensor '%s' is in two shards: %s and %s",
                        s->path, r[i].name, s->sub[r[i - 1].shard]->path, s->sub[r[i].shard]->path);
    wm__free(r);
    return st;
}

static bool has_key(const wm__kv *kvs, size_t n, const char *blob, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(blob + kvs[i].key_off, key)) return true;
    return false;
}

/* Moves into m what the shards own: their descriptors and paths, the header (the index's keys
 * and values, or shard 0's), shard 0's format-private state. Cannot fail. */
static void take_shards(set *s, wm_file *m) {
    wm_file *s0 = s->sub[0];
    m->format = s0->format;
    m->version = s0->version;
    m->alignment = s0->alignment;
    m->data_offset = s0->data_offset;
    m->n_shards = s->n;
    for (uint32_t i = 0; i < s->n; i++) {
        wm_file *f = s->sub[i];
        m->shards[i] = f->shards[0];
        m->shards[i].path = f->path; /* shards[0].path aliases f->path */
        f->path = NULL;
        f->n_shards = 0;
    }
    if (s->have_ix) {
        m->header = (unsigned char *)s->ix.blob; /* the index's keys and values */
        m->header_len = s->ix.blob_len;
        s->ix.blob = NULL;
    } else {
        m->header = s0->header;
        m->header_len = s0->header_len;
        m->header_map = s0->header_map;
        s0->header = NULL;
        s0->header_map = 0;
    }
    m->aux = s0->aux;
    m->aux_free = s0->aux_free;
    s0->aux = NULL;
    s0->aux_free = NULL;
}

/* Builds the one file from the parsed shards, moving their descriptors, paths and value buffers
 * into it. On failure the shards keep what they had. */
static wm_status merge(set *s, wm_file **out) {
    wm_file *s0 = s->sub[0];
    size_t total = 0;
    uint64_t size = 0, bytes = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        total += s->sub[i]->n_tensors;
        size += s->sub[i]->size;
        bytes += s->sub[i]->tensor_bytes;
    }
    if (total >= UINT32_MAX)
        return wm__err(s->err, WM_EFORMAT, 0, "%s: %zu tensors in the set are too many", s->path,
                       total);
    wm_status st = check_unique(s, total);
    if (st) return st;

    /* Metadata: the index's, then shard 0's keys that the index lacks. */
    size_t n_kv = s->have_ix ? s->ix.n_kv : 0;
    for (size_t i = 0; i < s0->n_kv; i++)
        if (!s->have_ix ||
            !has_key(s->ix.kvs, s->ix.n_kv, s->ix.blob, s0->names + s0->kvs[i].key_off))
            n_kv++;
    size_t names_len = 1;
    for (uint32_t i = 0; i < s->n; i++)
        for (size_t j = 0; j < s->sub[i]->n_tensors; j++)
            names_len += s->sub[i]->tensors[j].name_len + 1u;
    if (s->have_ix)
        for (size_t i = 0; i < s->ix.n_kv; i++)
            names_len += s->ix.kvs[i].key_len + 1u;
    for (size_t i = 0; i < s0->n_kv; i++)
        names_len += s0->kvs[i].key_len + 1u;
    if (names_len > UINT32_MAX)
        return wm__err(s->err, WM_EFORMAT, 0, "%s: the names of the set are too long", s->path);

    wm_file *m = wm__calloc(1, sizeof *m);
    if (!m) return wm__err(s->err, WM_ENOMEM, 0, "%s: out of memory", s->path);
    m->path = wm__strdup(s->path);
    m->shards = wm__calloc(s->n, sizeof *m->shards);
    m->tensors = total ? wm__calloc(total, sizeof *m->tensors) : NULL;
    m->kvs = n_kv ? wm__calloc(n_kv, sizeof *m->kvs) : NULL;
    m->names = wm__alloc(names_len);
    if (!m->path || !m->shards || (total && !m->tensors) || (n_kv && !m->kvs) || !m->names) {
        wm__file_free(m);
        return wm__err(s->err, WM_ENOMEM, 0, "%s: out of memory", s->path);
    }
    size_t p = 0, t = 0, k = 0;
    m->names[p++] = 0;
#define PUT_NAME(str, len, off)                                                                    \
    do {                                                                                           \
        memcpy(m->names + p, (str), (len));                                                        \
        (off) = (uint32_t)p;                                                                       \
        p += (len);                                                                                \
        m->names[p++] = 0;                                                                         \
    } while (0)
    if (s->have_ix)
        for (size_t i = 0; i < s->ix.n_kv; i++, k++) {
            m->kvs[k] = s->ix.kvs[i];
            PUT_NAME(s->ix.blob + s->ix.kvs[i].key_off, s->ix.kvs[i].key_len, m->kvs[k].key_off);
        }
    for (size_t i = 0; i < s0->n_kv; i++) {
        const char *key = s0->names + s0->kvs[i].key_off;
        if (s->have_ix && has_key(s->ix.kvs, s->ix.n_kv, s->ix.blob, key)) continue;
        m->kvs[k] = s0->kvs[i];
        PUT_NAME(key, s0->kvs[i].key_len, m->kvs[k].key_off);
        k++;
    }
    for (uint32_t i = 0; i < s->n; i++) {
        const wm_file *f = s->sub[i];
        for (size_t j = 0; j < f->n_tensors; j++, t++) {
            m->tensors[t] = f->tensors[j];
            m->tensors[t].shard = i;
            PUT_NAME(tname(f, j), f->tensors[j].name_len, m->tensors[t].name_off);
        }
    }
#undef PUT_NAME
    m->size = size;
    m->tensor_bytes = bytes;
    m->names_len = p;
    m->n_tensors = total;
    m->n_kv = n_kv;

    /* Nothing can fail from here to the index. */
    take_shards(s, m);
    st = wm__file_index(m, s->err);
    if (st) {
        wm__file_free(m);
        return st;
    }
    *out = m;
    return WM_OK;
}

static void set_free(set *s) {
    for (uint32_t i = 0; i < s->n; i++)
        wm__file_free(s->sub[i]);
    wm__free(s->sub);
    wm__st_index_free(&s->ix);
}

/* Opens one shard into s->sub[i]; a missing shard is named as such, with why it was looked for
 * (`by`; NULL: the open's own message, which names the path). `want` 0: either format. */
static wm_status open_shard(set *s, uint32_t i, const char *spath, wm_format want, const char *by) {
    wm_status st = wm__file_open_one(spath, &s->sub[i], s->err);
    if (st == WM_ENOENT && by)
        return wm__err(s->err, WM_ENOENT, s->err ? s->err->os_errno : 0,
                       "%s: shard %s (%s) is missing", s->path, spath, by);
    if (st) return st;
    if (want && s->sub[i]->format != want)
        return wm__err(s->err, WM_EFORMAT, 0, "%s: shard %s is a %s file, not %s", s->path, spath,
                       wm_format_name(s->sub[i]->format), wm_format_name(want));
    return WM_OK;
}

/* Opens shard k (1-based) of the set whose names follow `sn` into s->sub[k - 1]. */
static wm_status open_sibling(set *s, const shard_name *sn, unsigned k, wm_format want,
                              const char *by) {
    char *spath = sibling_path(s->path, sn, k);
    if (!spath) return wm__err(s->err, WM_ENOMEM, 0, "%s: out of memory", s->path);
    wm_status st = open_shard(s, k - 1, spath, want, by);
    wm__free(spath);
    return st;
}

/* The one end of every set's open: on success the shards are merged into *out; either way the
 * set is freed (the merged file has taken what it keeps). */
static wm_status set_finish(set *s, wm_status st, wm_file **out) {
    if (!st) st = merge(s, out);
    set_free(s);
    return st;
}

/* ---- safetensors sets ---- */

typedef struct mref {
    const char *tensor, *shard;
} mref;

static int mref_cmp(const void *a, const void *b) {
    return strcmp(((const mref *)a)->tensor, ((const mref *)b)->tensor);
}

static int str_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool safe_shard_name(const char *name) {
    if (!name[0] || name[0] == '/') return false;
    for (const char *p = name; *p;) {
        const char *q = strchr(p, '/');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') return false;
        p += n + (q ? 1 : 0);
    }
    return true;
}

/* Checks every shard's tensors against the weight_map: none extra, none missing, each in the
 * shard the index names. Shards are named as the index names them (relative to its folder, which
 * the message's first path gives), so that a message of two shards fits. */
static wm_status check_weight_map(set *s, const char *const *shard_names, const char *index_path) {
    size_t n = s->ix.n_map;
    mref *r = n ? wm__alloc(n * sizeof *r) : NULL;
    if (n && !r) return wm__err(s->err, WM_ENOMEM, 0, "%s: out of memory", s->path);
    for (size_t i = 0; i < n; i++)
        r[i] = (mref){s->ix.blob + s->ix.map[i][0], s->ix.blob + s->ix.map[i][1]};
    if (n) qsort(r, n, sizeof *r, mref_cmp);
    wm_status st = WM_OK;
    for (size_t i = 1; i < n && !st; i++)
        if (!strcmp(r[i - 1].tensor, r[i].tensor))
            st = wm__err(s->err, WM_EFORMAT, 0, "%s: weight_map lists tensor '%s' twice",
                         index_path, r[i].tensor);
    size_t matched = 0;
    for (uint32_t k = 0; k < s->n && !st; k++) {
        const wm_file *f = s->sub[k];
        for (size_t j = 0; j < f->n_tensors && !st; j++) {
            mref key = {tname(f, j), NULL};
            const mref *hit = n ? bsearch(&key, r, n, sizeof *r, mref_cmp) : NULL;
            if (!hit)
                st = wm__err(s->err, WM_EFORMAT, 0,
                             "%s: shard %s holds tensor '%s', which the index "
                             "does not list",
                             index_path, shard_names[k], key.tensor);
            else if (strcmp(hit->shard, shard_names[k]) != 0)
                st = wm__err(s->err, WM_EFORMAT, 0,
                             "%s: tensor '%s' is in shard %s, but the index "
                             "puts it in %s",
                             index_path, key.tensor, shard_names[k], hit->shard);
            else
                matched++;
        }
    }
    if (!st && matched != n) {
        for (size_t i = 0; i < n && !st; i++) {
            const char **sh = bsearch(&r[i].shard, shard_names, s->n, sizeof *shard_names, str_cmp);
            size_t idx;
            if (sh && wm__index_find_tensor(s->sub[sh - shard_names], r[i].tensor,
                                            strlen(r[i].tensor), &idx) != WM_OK)
                st = wm__err(s->err, WM_EFORMAT, 0,
                             "%s: tensor '%s' is listed for shard %s, which "
                             "does not hold it",
                             index_path, r[i].tensor, *sh);
        }
        if (!st)
            st = wm__err(s->err, WM_EFORMAT, 0,
                         "%s: the index lists %zu tensors, the shards hold %zu", index_path, n,
                         matched);
    }
    wm__free(r);
    return st;
}

/* The set described by an index file. */
static wm_status open_st_index(const char *user_path, const char *index_path, wm_file **out,
                               wm_error *err) {
    set s = {.path = user_path, .err = err};
    const char **names = NULL;
    char *spath = NULL;
    wm_status st = read_index(index_path, &s.ix, err);
    if (st) goto done;
    s.have_ix = true;
    /* Distinct shard file names, sorted, so shard 0 is the first of the set. */
    if (s.ix.n_map && !(names = wm__alloc(s.ix.n_map * sizeof *names))) {
        st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory", user_path);
        goto done;
    }
    for (size_t i = 0; i < s.ix.n_map; i++) {
        names[i] = s.ix.blob + s.ix.map[i][1];
        if (!safe_shard_name(names[i])) {
            st = wm__err(err, WM_EFORMAT, 0,
                         "%s: weight_map names the shard '%s', which is not a "
                         "file name below the index's folder",
                         index_path, names[i]);
            goto done;
        }
    }
    size_t nn = 0;
    if (s.ix.n_map) {
        qsort(names, s.ix.n_map, sizeof *names, str_cmp);
        for (size_t i = 0; i < s.ix.n_map; i++)
            if (!nn || strcmp(names[nn - 1], names[i])) names[nn++] = names[i];
    }
    if (nn == 0) {
        st = wm__err(err, WM_EFORMAT, 0, "%s: the weight_map names no tensors", index_path);
        goto done;
    }
    if (nn > MAX_SHARDS) {
        st = wm__err(err, WM_EFORMAT, 0, "%s: %zu shards are more than %u", index_path, nn,
                     MAX_SHARDS);
        goto done;
    }
    if (!(s.sub = wm__calloc(nn, sizeof *s.sub))) {
        st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory", user_path);
        goto done;
    }
    const char *slash = strrchr(index_path, '/');
    size_t dir_len = slash ? (size_t)(slash - index_path) + 1 : 0;
    for (size_t i = 0; i < nn; i++) {
        size_t cap = dir_len + strlen(names[i]) + 1;
        wm__free(spath);
        if (!(spath = wm__alloc(cap))) {
            st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory", user_path);
            goto done;
        }
        snprintf(spath, cap, "%.*s%s", (int)dir_len, index_path, names[i]);
        s.n = (uint32_t)i + 1;
        st = open_shard(&s, (uint32_t)i, spath, WM_FORMAT_SAFETENSORS, "named by the index");
        if (st) goto done;
    }
    if (user_path != index_path) {
        /* A shard's path opens the index beside it: that index must name the shard. */
        const char *base = strrchr(user_path, '/');
        base = base ? base + 1 : user_path;
        if (!bsearch(&base, names, nn, sizeof *names, str_cmp)) {
            st = wm__err(err, WM_EFORMAT, 0,
                         "%s: the index beside it, %s, does not name this shard in its "
                         "weight_map",
                         user_path, index_path);
            goto done;
        }
    }
    st = check_weight_map(&s, names, index_path);
done:
    wm__free(spath);
    wm__free(names);
    return set_finish(&s, st, out);
}

/* Shards named NAME-0000K-of-0000N.safetensors: through NAME.safetensors.index.json when it
 * exists, else every K from 1 to N. */
static wm_status open_st_shards(const char *path, const shard_name *sn, wm_file **out,
                                wm_error *err) {
    if (sn->k < 1 || sn->k > sn->n)
        return wm__err(err, WM_EFORMAT, 0, "%s: shard number %u is not between 1 and %u", path,
                       sn->k, sn->n);
    size_t cap = sn->prefix_len + sizeof ST_INDEX_EXT;
    char *ipath = wm__alloc(cap);
    if (!ipath) return wm__err(err, WM_ENOMEM, 0, "%s: out of memory", path);
    snprintf(ipath, cap, "%.*s%s", (int)sn->prefix_len, path, ST_INDEX_EXT);
    wm_os_stat stt;
    int e = wm__os_stat_path(ipath, &stt);
    wm_status st;
    if (e == 0) {
        st = open_st_index(path, ipath, out, err);
        wm__free(ipath);
        return st;
    }
    if (e != ENOENT) {
        st = wm__err(err, wm__status_io(e), e, "%s: cannot stat the index %s: %s", path, ipath,
                     wm__errno_text(e));
        wm__free(ipath);
        return st;
    }
    wm__free(ipath);
    set s = {.path = path, .err = err};
    s.sub = wm__calloc(sn->n, sizeof *s.sub);
    st = s.sub ? WM_OK : wm__err(err, WM_ENOMEM, 0, "%s: out of memory", path);
    for (unsigned k = 1; k <= sn->n && !st; k++) {
        s.n = k;
        st = open_sibling(&s, sn, k, WM_FORMAT_SAFETENSORS, "the name says there are that many");
    }
    return set_finish(&s, st, out);
}

/* ---- GGUF split sets ---- */

/* Reads a split.* key as an unsigned integer (any integer type, not negative) from the parsed
 * metadata, through the index (format/ does not call up into file.c's public getters); *present
 * false when the key is absent. */
static wm_status split_key(const wm_file *f, const char *key, uint64_t *v, bool *present,
                           wm_error *err) {
    size_t i;
    *present = wm__index_find_kv(f, key, strlen(key), &i) == WM_OK;
    if (!*present) return WM_OK;
    const wm__kv *kv = &f->kvs[i];
    unsigned width = 0;
    bool is_signed = false;
    switch (kv->type) {
    case WM_VALUE_I8: is_signed = true; /* fall through */
    case WM_VALUE_U8: width = 1; break;
    case WM_VALUE_I16: is_signed = true; /* fall through */
    case WM_VALUE_U16: width = 2; break;
    case WM_VALUE_I32: is_signed = true; /* fall through */
    case WM_VALUE_U32: width = 4; break;
    case WM_VALUE_I64: is_signed = true; /* fall through */
    case WM_VALUE_U64: width = 8; break;
    default: break;
    }
    if (!width || (is_signed && (kv->val[width - 1] & 0x80)))
        return wm__err(err, WM_EFORMAT, 0, "%s: %s is not a non-negative integer", f->path, key);
    uint64_t u = 0;
    for (unsigned b = 0; b < width; b++) /* little-endian, as GGUF stores it */
        u |= (uint64_t)kv->val[b] << (8 * b);
    *v = u;
    return WM_OK;
}

/* The split keys of a GGUF set of s->n parts, each open: every part says split.count `count`
 * and its own place (split.no k - 1 for the k-th), and part 0's split.tensors.count is the
 * tensors of all parts. `place` says what gives a part its place ("the name", "the list"). */
static wm_status check_split(set *s, uint64_t count, const char *place) {
    wm_error *err = s->err;
    wm_status st;
    bool present;
    for (uint32_t k = 1; k <= s->n; k++) {
        const wm_file *f = s->sub[k - 1];
        uint64_t c, no;
        if ((st = split_key(f, "split.count", &c, &present, err))) return st;
        if (!present || c != count)
            return wm__err(err, WM_EFORMAT, 0, "%s: split.count is %s%llu in this part, %llu in %s",
                           f->path, present ? "" : "missing, not ",
                           (unsigned long long)(present ? c : count), (unsigned long long)count,
                           s->path);
        if ((st = split_key(f, "split.no", &no, &present, err))) return st;
        if (!present || no != k - 1)
            return wm__err(err, WM_EFORMAT, 0,
                           "%s: split.no is %s%llu, but %s makes it part %u (split.no %u)", f->path,
                           present ? "" : "missing, not ",
                           (unsigned long long)(present ? no : k - 1), place, k, k - 1);
    }
    uint64_t want, have = 0;
    if ((st = split_key(s->sub[0], "split.tensors.count", &want, &present, err))) return st;
    for (uint32_t i = 0; i < s->n; i++)
        have += s->sub[i]->n_tensors;
    if (!present || want != have)
        return wm__err(err, WM_EFORMAT, 0,
                       "%s: split.tensors.count is %s%llu, but the %u parts hold %llu tensors",
                       s->sub[0]->path, present ? "" : "missing, not ", (unsigned long long)want,
                       s->n, (unsigned long long)have);
    return WM_OK;
}

/* `first` is the file the caller named, already open; it becomes shard split.no of the set. */
static wm_status open_gguf_split(const char *path, wm_file *first, uint64_t count, wm_file **out,
                                 wm_error *err) {
    set s = {.path = path, .err = err};
    wm_status st;
    shard_name sn;
    if (!parse_shard_name(path, ".gguf", &sn)) {
        st = wm__err(err, WM_EFORMAT, 0,
                     "%s: split.count is %llu, but the name does not end in "
                     "-0000K-of-0000N.gguf, so the other parts cannot be found",
                     path, (unsigned long long)count);
        goto done;
    }
    if (sn.n != count || count > MAX_SHARDS) {
        st = wm__err(err, WM_EFORMAT, 0, "%s: split.count is %llu, but the name says %u parts",
                     path, (unsigned long long)count, sn.n);
        goto done;
    }
    if (!(s.sub = wm__calloc(sn.n, sizeof *s.sub))) {
        st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory", path);
        goto done;
    }
    s.n = sn.n;
    if (sn.k < 1 || sn.k > sn.n) {
        st = wm__err(err, WM_EFORMAT, 0, "%s: part number %u is not between 1 and %u", path, sn.k,
                     sn.n);
        goto done;
    }
    s.sub[sn.k - 1] = first;
    first = NULL;
    for (unsigned k = 1; k <= sn.n; k++)
        if (!s.sub[k - 1] &&
            (st = open_sibling(&s, &sn, k, WM_FORMAT_GGUF, "split.count says there are that many")))
            goto done;
    st = check_split(&s, count, "the name");
done:
    wm__file_free(first);
    return set_finish(&s, st, out);
}

/* ---- explicit lists ---- */

typedef struct fref {
    uint64_t dev, ino;
    uint32_t i;
} fref;

static int fref_cmp(const void *a, const void *b) {
    const fref *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* No file twice in a list, by device and inode (two paths to one file would alias its bytes and
 * its tensors, and hold it twice). */
static wm_status check_distinct(set *s) {
    fref *r = wm__alloc(s->n * sizeof *r);
    if (!r) return wm__err(s->err, WM_ENOMEM, 0, "%s: out of memory", s->path);
    for (uint32_t i = 0; i < s->n; i++)
        r[i] = (fref){s->sub[i]->shards[0].st.dev, s->sub[i]->shards[0].st.ino, i};
    qsort(r, s->n, sizeof *r, fref_cmp);
    wm_status st = WM_OK;
    for (uint32_t i = 1; i < s->n && !st; i++)
        if (r[i - 1].dev == r[i].dev && r[i - 1].ino == r[i].ino)
            st = wm__err(s->err, WM_EINVAL, 0,
                         "%s: listed twice, as paths[%u] and paths[%u] (%s): a set holds each "
                         "file once",
                         s->sub[r[i - 1].i]->path, r[i - 1].i, r[i].i, s->sub[r[i].i]->path);
    wm__free(r);
    return st;
}

/* The list's checks after each file opened alone: one format, each file once, and for GGUF
 * parts that carry split keys, the keys of a set of exactly these parts in this order. */
static wm_status check_list(set *s) {
    for (uint32_t i = 1; i < s->n; i++)
        if (s->sub[i]->format != s->sub[0]->format)
            return wm__err(s->err, WM_EFORMAT, 0, "%s: a %s file, in a list whose first (%s) is %s",
                           s->sub[i]->path, wm_format_name(s->sub[i]->format), s->path,
                           wm_format_name(s->sub[0]->format));
    wm_status st = check_distinct(s);
    if (st || s->sub[0]->format != WM_FORMAT_GGUF) return st;
    for (uint32_t i = 0; i < s->n; i++) {
        uint64_t count;
        bool present;
        if ((st = split_key(s->sub[i], "split.count", &count, &present, s->err))) return st;
        if (present && count > 1) return check_split(s, s->n, "the list");
    }
    return WM_OK;
}

/* ---- entry points ---- */

wm_status wm__shards_open(const char *path, bool whole_set, wm_file **out, wm_error *err) {
    *out = NULL;
    if (wm__ends_with(path, ST_INDEX_EXT)) return open_st_index(path, path, out, err);
    shard_name sn;
    if (whole_set && parse_shard_name(path, ST_EXT, &sn))
        return open_st_shards(path, &sn, out, err);
    wm_file *f;
    wm_status st = wm__file_open_one(path, &f, err);
    if (st) return st;
    if (whole_set && f->format == WM_FORMAT_GGUF) {
        uint64_t count;
        bool present;
        st = split_key(f, "split.count", &count, &present, err);
        if (st) {
            wm__file_free(f);
            return st;
        }
        if (present && count > 1) return open_gguf_split(path, f, count, out, err);
    }
    *out = f;
    return WM_OK;
}

wm_status wm__shards_open_list(const char *const *paths, size_t n, wm_file **out, wm_error *err) {
    *out = NULL;
    if (n > MAX_SHARDS)
        return wm__err(err, WM_EINVAL, 0, "wm_file_open_paths: %zu files are more than %u", n,
                       MAX_SHARDS);
    for (size_t i = 0; i < n; i++) {
        if (!paths[i])
            return wm__err(err, WM_EINVAL, 0, "wm_file_open_paths: paths[%zu] is NULL", i);
        if (wm__ends_with(paths[i], ST_INDEX_EXT))
            return wm__err(err, WM_EINVAL, 0,
                           "%s: an index is not a shard: open the set it describes with "
                           "wm_file_open, or list its shards",
                           paths[i]);
    }
    if (n == 1) return wm__file_open_one(paths[0], out, err);
    set s = {.path = paths[0], .err = err};
    wm_status st = WM_OK;
    if (!(s.sub = wm__calloc(n, sizeof *s.sub)))
        st = wm__err(err, WM_ENOMEM, 0, "%s: out of memory", paths[0]);
    for (uint32_t i = 0; i < n && !st; i++) {
        s.n = i + 1;
        st = open_shard(&s, i, paths[i], 0, NULL);
    }
    if (!st) st = check_list(&s);
    return set_finish(&s, st, out);
}
