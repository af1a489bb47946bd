/*
 * makemodel.c: `weightmap make-model OUT --size BYTES [--seed N] [--format gguf|safetensors]
 * [--shards N]`; demo makes its default model through cli_make_default_model.
 *
 * Writes a deterministic llama-shaped model that llama.cpp accepts: token_embd (F16), per block
 * attn_norm/ffn_norm (F32), attn_q/k/v/output (Q8_0), ffn_gate/up/down (Q4_0), output_norm
 * (F32), output (Q8_0), with llama.* hyper-parameters and a tokenizer (tokens, scores, types).
 * `--format safetensors` writes the same names and shapes with F16 for every matrix (safetensors
 * has no block-quantized types) and F32 norms, the hyper-parameters as __metadata__ strings.
 * The same arguments give the same bytes: all data comes from a splitmix64 stream seeded by
 * --seed and the tensor's index, and nothing depends on time, locale or the machine. The size is
 * an upper bound that the shapes approach: widths and the layer count are picked to fill it.
 *
 * `--shards N` writes a set instead of one file: OUT's stem + -0000K-of-0000N + extension for
 * each part. GGUF parts carry split.no, split.count and split.tensors.count (as llama.cpp's
 * gguf-split writes them: every key in the first part, only the split keys in the others);
 * safetensors parts come with STEM.safetensors.index.json. Tensors are cut into N runs of about
 * equal bytes, in order; the tensor data do not depend on N.
 *
 * Sections: the plan (shapes from the size), the GGUF writer, the safetensors writer, data,
 * sharding and the command.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* ---- deterministic data ---- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t next64(rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A finite half in about +-[2^-8, 2^-1): sign and mantissa random, exponent 7..14. */
static uint16_t rand_half(uint64_t r) {
    return (uint16_t)((r & 0x83ffu) | ((uint16_t)(7 + ((r >> 16) & 7)) << 10));
}

/* ---- the plan ---- */

typedef struct tensor_plan {
    char name[64];
    wm_type type;
    uint32_t n_dims;
    uint64_t ne[2];
    uint64_t nbytes;
    uint64_t offset; /* in the data section */
} tensor_plan;

typedef struct model_plan {
    uint32_t n_embd, n_ff, n_layer, n_vocab, n_head;
    tensor_plan *t;
    size_t n;
} model_plan;

static uint64_t tbytes(wm_type type, uint64_t ne0, uint64_t ne1) {
    return ne0 / wm_type_block_elems(type) * wm_type_block_bytes(type) * ne1;
}

static void add(model_plan *p, const char *name, wm_type type, uint64_t ne0, uint64_t ne1) {
    tensor_plan *t = &p->t[p->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = ne1 > 1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->nbytes = tbytes(type, ne0, ne1);
}

/* Matrix types: Q8_0 and Q4_0 for GGUF; F16 for safetensors (st). */
/* The bytes of a model of width e beyond its layers (embeddings, output, norms, tokenizer and
 * header room), and of one layer. */
static void width_bytes(uint32_t e, bool st, uint64_t *fixed, uint64_t *layer) {
    const wm_type q8 = st ? WM_TYPE_F16 : WM_TYPE_Q8_0, q4 = st ? WM_TYPE_F16 : WM_TYPE_Q4_0;
    uint32_t ff = (e * 8 / 3 + 255) / 256 * 256;
    uint32_t vocab = e >= 1024 ? 32000 : e * 32;
    *fixed = tbytes(WM_TYPE_F16, e, vocab) + tbytes(q8, e, vocab) + 4ull * e +
             (uint64_t)vocab * 24 + 65536;
    *layer = 4 * tbytes(q8, e, e) + 3 * tbytes(q4, e, ff) + 8ull * e;
}

/* The smallest --size plan() accepts: one layer of the narrowest width. */
static uint64_t min_size(bool st) {
    uint64_t fixed, layer;
    width_bytes(64, st, &fixed, &layer);
    return fixed + layer;
}

static bool plan(uint64_t size, bool st, model_plan *p) {
    static const uint32_t widths[] = {4096, 2048, 1024, 512, 256, 128, 64};
    const wm_type q8 = st ? WM_TYPE_F16 : WM_TYPE_Q8_0, q4 = st ? WM_TYPE_F16 : WM_TYPE_Q4_0;
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        uint32_t e = widths[w];
        uint32_t ff = (e * 8 / 3 + 255) / 256 * 256;
        uint32_t vocab = e >= 1024 ? 32000 : e * 32;
        uint64_t fixed, layer;
        width_bytes(e, st, &fixed, &layer);
        if (fixed + 2 * layer > size && e != 64) continue;
        uint64_t n_layer = size > fixed ? (size - fixed) / layer : 0;
        if (n_layer < 1) return false;
        if (n_layer > 1000) n_layer = 1000;
        p->n_embd = e;
        p->n_ff = ff;
        p->n_layer = (uint32_t)n_layer;
        p->n_vocab = vocab;
        p->n_head = e / 64 ? e / 64 : 1;
        p->t = calloc(3 + 9 * n_layer, sizeof *p->t);
        if (!p->t) return false;
        add(p, "token_embd.weight", WM_TYPE_F16, e, vocab);
        for (uint32_t l = 0; l < n_layer; l++) {
            char nm[64];
#define L(suffix, type, a, b)                                                                      \
    snprintf(nm, sizeof nm, "blk.%u." suffix, l);                                                  \
    add(p, nm, type, a, b)
            L("attn_norm.weight", WM_TYPE_F32, e, 1);
            L("attn_q.weight", q8, e, e);
            L("attn_k.weight", q8, e, e);
            L("attn_v.weight", q8, e, e);
            L("attn_output.weight", q8, e, e);
            L("ffn_norm.weight", WM_TYPE_F32, e, 1);
            L("ffn_gate.weight", q4, e, ff);
            L("ffn_up.weight", q4, e, ff);
            L("ffn_down.weight", q4, ff, e);
#undef L
        }
        add(p, "output_norm.weight", WM_TYPE_F32, e, 1);
        add(p, "output.weight", q8, e, vocab);
        return true;
    }
    return false;
}

/* Fills buf with n bytes of tensor data of `type` (n a multiple of the block). */
static void fill(rng *r, wm_type type, unsigned char *buf, size_t n) {
    switch (type) {
    case WM_TYPE_F32:
        for (size_t i = 0; i + 4 <= n; i += 4) {
            float v = 1.0f + (float)((int)(next64(r) & 1023) - 512) / 4096.0f;
            memcpy(buf + i, &v, 4);
        }
        break;
    case WM_TYPE_F16:
        for (size_t i = 0; i + 8 <= n; i += 8) {
            uint64_t x = next64(r);
            for (int k = 0; k < 4; k++) {
                /* a rotation by k * 16 (k = 0 is x itself: a shift by 64 is undefined) */
                uint16_t h = rand_half(k ? x >> (k * 16) | x << (64 - k * 16) : x);
                memcpy(buf + i + 2 * k, &h, 2);
            }
        }
        break;
    default: { /* Q8_0 and Q4_0: an f16 scale then random quants */
        uint32_t bb = wm_type_block_bytes(type);
        for (size_t i = 0; i + bb <= n; i += bb) {
            uint64_t x = next64(r);
            uint16_t d = (uint16_t)(0x1c00u | (x & 0x3ffu)); /* scale ~ 2^-8 */
            memcpy(buf + i, &d, 2);
            for (size_t k = 2; k < bb; k += 8) {
                uint64_t q = next64(r);
                size_t m = bb - k < 8 ? bb - k : 8;
                memcpy(buf + i + k, &q, m);
            }
        }
    }
    }
}

/* ---- writers ---- */

typedef struct out_buf {
    unsigned char *p;
    size_t len, cap;
    bool oom;
} out_buf;

static void put(out_buf *b, const void *d, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 1 << 16;
        while (c < b->len + n)
            c *= 2;
        unsigned char *q = realloc(b->p, c);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}
static void put_u32(out_buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(out_buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(out_buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void kv_str(out_buf *b, const char *k, const char *v) {
    put_str(b, k);
    put_u32(b, WM_VALUE_STRING);
    put_str(b, v);
}
static void kv_u32(out_buf *b, const char *k, uint32_t v) {
    put_str(b, k);
    put_u32(b, WM_VALUE_U32);
    put_u32(b, v);
}
static void kv_f32(out_buf *b, const char *k, float v) {
    put_str(b, k);
    put_u32(b, WM_VALUE_F32);
    put(b, &v, 4);
}

static void kv_u16(out_buf *b, const char *k, uint16_t v) {
    put_str(b, k);
    put_u32(b, WM_VALUE_U16);
    put(b, &v, 2);
}
static void kv_i32(out_buf *b, const char *k, int32_t v) {
    put_str(b, k);
    put_u32(b, WM_VALUE_I32);
    put(b, &v, 4);
}

/* A run of tensors [first, last) written to one file. */
typedef struct part {
    size_t first, last;
    uint32_t no, count; /* 0-based part number and the number of parts; count 0: not a set */
} part;

/* Writes the data of a part's tensors; each tensor's offset is relative to data_start. */
/* A write of `path` failed with errno `e`: one line saying so, and the partial file removed (a
 * regular file only: OUT may be /dev/full or a pipe). */
static void written_fail(const char *path, int e) {
    struct stat st;
    bool partial = stat(path, &st) == 0 && S_ISREG(st.st_mode) && unlink(path) == 0;
    fprintf(stderr, "weightmap: %s: write failed: %s%s\n", path, e ? strerror(e) : "an I/O error",
            partial ? " (the partial file was removed)" : "");
}

static int write_data(FILE *fp, const model_plan *p, const part *pt, uint64_t seed,
                      uint64_t data_start) {
    size_t chunk = 1 << 20;
    unsigned char *buf = malloc(chunk);
    if (!buf) return 1;
    uint64_t pos = data_start;
    for (size_t i = pt->first; i < pt->last; i++) {
        const tensor_plan *t = &p->t[i];
        uint64_t at = data_start + t->offset;
        static const unsigned char zero[64];
        while (pos < at) { /* alignment padding */
            size_t k = at - pos < sizeof zero ? (size_t)(at - pos) : sizeof zero;
            fwrite(zero, 1, k, fp);
            pos += k;
        }
        rng r = {seed * 0x100000001b3ull + i};
        uint32_t bb = wm_type_block_bytes(t->type);
        size_t step = chunk / bb * bb;
        for (uint64_t done = 0; done < t->nbytes;) {
            size_t k = t->nbytes - done < step ? (size_t)(t->nbytes - done) : step;
            fill(&r, t->type, buf, k);
            if (fwrite(buf, 1, k, fp) != k) {
                free(buf);
                return 1; /* write_file says so, with errno's text */
            }
            done += k;
            pos += k;
        }
    }
    free(buf);
    return 0;
}

/* Writes the header bytes in b and then the data; frees b. */
static int write_file(const char *out, out_buf *b, const model_plan *p, const part *pt,
                      uint64_t seed, uint64_t data_start) {
    if (b->oom) {
        free(b->p);
        fprintf(stderr, "weightmap: %s: out of memory\n", out);
        return 1;
    }
    FILE *fp = fopen(out, "wb");
    if (!fp) {
        free(b->p);
        fprintf(stderr, "weightmap: %s: cannot create: %s\n", out, strerror(errno));
        return 1;
    }
    errno = 0;
    int rc = fwrite(b->p, 1, b->len, fp) == b->len ? 0 : 1;
    free(b->p);
    if (!rc) rc = write_data(fp, p, pt, seed, data_start);
    int e = errno;
    if (fclose(fp) != 0 && !rc) rc = 1, e = errno;
    if (rc) written_fail(out, e);
    return rc;
}

/* ---- GGUF ---- */

static void gguf_model_kvs(out_buf *b, const model_plan *p) {
    kv_str(b, "general.architecture", "llama");
    kv_str(b, "general.name", "weightmap-default");
    kv_u32(b, "general.alignment", 32);
    kv_u32(b, "llama.context_length", 2048);
    kv_u32(b, "llama.embedding_length", p->n_embd);
    kv_u32(b, "llama.block_count", p->n_layer);
    kv_u32(b, "llama.feed_forward_length", p->n_ff);
    kv_u32(b, "llama.attention.head_count", p->n_head);
    kv_u32(b, "llama.attention.head_count_kv", p->n_head);
    kv_u32(b, "llama.rope.dimension_count", p->n_embd / p->n_head);
    kv_f32(b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_u32(b, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(b, "tokenizer.ggml.eos_token_id", 2);
    /* tokens: <unk> <s> </s>, the 256 byte tokens, then words */
    put_str(b, "tokenizer.ggml.tokens");
    put_u32(b, WM_VALUE_ARRAY);
    put_u32(b, WM_VALUE_STRING);
    put_u64(b, p->n_vocab);
    for (uint32_t i = 0; i < p->n_vocab; i++) {
        char tok[32];
        if (i == 0)
            snprintf(tok, sizeof tok, "<unk>");
        else if (i == 1)
            snprintf(tok, sizeof tok, "<s>");
        else if (i == 2)
            snprintf(tok, sizeof tok, "</s>");
        else if (i < 3 + 256)
            snprintf(tok, sizeof tok, "<0x%02X>", i - 3);
        else
            snprintf(tok, sizeof tok, "\xe2\x96\x81t%u", i);
        put_str(b, tok);
    }
    put_str(b, "tokenizer.ggml.scores");
    put_u32(b, WM_VALUE_ARRAY);
    put_u32(b, WM_VALUE_F32);
    put_u64(b, p->n_vocab);
    for (uint32_t i = 0; i < p->n_vocab; i++) {
        float s = -(float)i;
        put(b, &s, 4);
    }
    put_str(b, "tokenizer.ggml.token_type");
    put_u32(b, WM_VALUE_ARRAY);
    put_u32(b, WM_VALUE_I32);
    put_u64(b, p->n_vocab);
    for (uint32_t i = 0; i < p->n_vocab; i++) {
        int32_t ty = i == 0 ? 2 : i < 3 ? 3 : i < 3 + 256 ? 6 : 1;
        put(b, &ty, 4);
    }
}

static int write_gguf(const char *out, model_plan *p, const part *pt, uint64_t seed) {
    uint64_t off = 0;
    for (size_t i = pt->first; i < pt->last; i++) {
        p->t[i].offset = off;
        off = (off + p->t[i].nbytes + 31) / 32 * 32;
    }
    out_buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, pt->last - pt->first);
    uint64_t n_kv = (pt->no == 0 ? 17 : 0) + (pt->count ? 3 : 0);
    put_u64(&b, n_kv);
    if (pt->no == 0) gguf_model_kvs(&b, p);
    if (pt->count) {
        kv_u16(&b, "split.no", (uint16_t)pt->no);
        kv_u16(&b, "split.count", (uint16_t)pt->count);
        kv_i32(&b, "split.tensors.count", (int32_t)p->n);
    }
    for (size_t i = pt->first; i < pt->last; i++) {
        const tensor_plan *t = &p->t[i];
        put_str(&b, t->name);
        put_u32(&b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            put_u64(&b, t->ne[d]);
        put_u32(&b, (uint32_t)t->type);
        put_u64(&b, t->offset);
    }
    uint64_t data_start = (b.len + 31) / 32 * 32;
    static const unsigned char zero[32];
    put(&b, zero, (size_t)(data_start - b.len));
    return write_file(out, &b, p, pt, seed, data_start);
}

/* ---- safetensors ---- */

static void put_txt(out_buf *b, const char *s) { put(b, s, strlen(s)); }

static const char *st_dtype(wm_type t) { return t == WM_TYPE_F32 ? "F32" : "F16"; }

static int write_safetensors(const char *out, model_plan *p, const part *pt, uint64_t seed) {
    out_buf b = {0};
    char num[160];
    put_u64(&b, 0); /* header length, patched below */
    snprintf(num, sizeof num,
             "{\"__metadata__\":{\"format\":\"pt\",\"general.architecture\":\"llama\","
             "\"general.name\":\"weightmap-default\",\"llama.embedding_length\":\"%u\",",
             p->n_embd);
    put_txt(&b, num);
    snprintf(num, sizeof num,
             "\"llama.block_count\":\"%u\",\"llama.feed_forward_length\":\"%u\","
             "\"llama.attention.head_count\":\"%u\",\"llama.vocab_size\":\"%u\"}",
             p->n_layer, p->n_ff, p->n_head, p->n_vocab);
    put_txt(&b, num);
    uint64_t off = 0;
    for (size_t i = pt->first; i < pt->last; i++) {
        tensor_plan *t = &p->t[i];
        t->offset = off;
        put_txt(&b, ",\"");
        put_txt(&b, t->name);
        /* safetensors shapes are outermost first: the reverse of ggml's order */
        if (t->n_dims == 2)
            snprintf(num, sizeof num, "\":{\"dtype\":\"%s\",\"shape\":[%llu,%llu],",
                     st_dtype(t->type), (unsigned long long)t->ne[1], (unsigned long long)t->ne[0]);
        else
            snprintf(num, sizeof num, "\":{\"dtype\":\"%s\",\"shape\":[%llu],", st_dtype(t->type),
                     (unsigned long long)t->ne[0]);
        put_txt(&b, num);
        snprintf(num, sizeof num, "\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + t->nbytes));
        put_txt(&b, num);
        off += t->nbytes;
    }
    put_txt(&b, "}");
    while ((b.len - 8) % 8)
        put_txt(&b, " "); /* the reference pads the header to 8 bytes */
    if (!b.oom) {
        uint64_t n = b.len - 8;
        memcpy(b.p, &n, 8);
    }
    return write_file(out, &b, p, pt, seed, b.len);
}

/* The index of a safetensors set: total_size and the shard of every tensor. */
static int write_index(const char *path, const model_plan *p, const part *parts, uint32_t n,
                       char *const *names) {
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        fprintf(stderr, "weightmap: %s: cannot create: %s\n", path, strerror(errno));
        return 1;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < p->n; i++)
        total += p->t[i].nbytes;
    fprintf(fp, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {",
            (unsigned long long)total);
    bool first = true;
    for (uint32_t k = 0; k < n; k++) {
        const char *base = strrchr(names[k], '/');
        base = base ? base + 1 : names[k];
        for (size_t i = parts[k].first; i < parts[k].last; i++) {
            fprintf(fp, "%s\n    \"%s\": \"%s\"", first ? "" : ",", p->t[i].name, base);
            first = false;
        }
    }
    fputs("\n  }\n}\n", fp);
    errno = 0;
    int rc = ferror(fp) ? 1 : 0, e = errno;
    if (fclose(fp) != 0 && !rc) rc = 1, e = errno;
    if (rc) written_fail(path, e);
    return rc;
}

/* ---- sharding and the command ---- */

/* Cuts the tensors into n runs of about equal bytes (each at least one tensor). */
static void cut(const model_plan *p, uint32_t n, part *parts) {
    uint64_t total = 0, acc = 0;
    for (size_t i = 0; i < p->n; i++)
        total += p->t[i].nbytes;
    size_t i = 0;
    for (uint32_t k = 0; k < n; k++) {
        parts[k] = (part){i, i, k, n};
        uint64_t goal = total / n * (k + 1);
        size_t left_parts = n - k - 1;
        while (parts[k].last < p->n - left_parts &&
               (parts[k].last == parts[k].first || k + 1 == n ||
                acc + p->t[parts[k].last].nbytes / 2 <= goal)) {
            acc += p->t[parts[k].last].nbytes;
            parts[k].last++;
        }
        i = parts[k].last;
    }
}

/* The set: OUT's stem + -0000K-of-0000N + extension for each part, and for safetensors the
 * index. */
static int write_set(const char *out, model_plan *p, bool st, uint32_t count, uint64_t seed) {
    int rc = 0;
    /* OUT's stem: without .gguf / .safetensors */
    const char *ext = st ? ".safetensors" : ".gguf";
    size_t n = strlen(out), el = strlen(ext);
    size_t stem = n >= el && !strcmp(out + n - el, ext) ? n - el : n;
    part *parts = calloc(count, sizeof *parts);
    char **names = calloc(count, sizeof *names);
    if (!parts || !names) rc = 1;
    if (!rc) cut(p, count, parts);
    for (uint32_t k = 0; k < count && !rc; k++) {
        size_t cap = stem + el + 32;
        if (!(names[k] = malloc(cap))) {
            rc = 1;
            break;
        }
        snprintf(names[k], cap, "%.*s-%05u-of-%05u%s", (int)stem, out, k + 1, count, ext);
        rc = st ? write_safetensors(names[k], p, &parts[k], seed)
                : write_gguf(names[k], p, &parts[k], seed);
    }
    if (!rc && st) {
        size_t cap = stem + 32;
        char *ipath = malloc(cap);
        if (!ipath)
            rc = 1;
        else {
            snprintf(ipath, cap, "%.*s.safetensors.index.json", (int)stem, out);
            rc = write_index(ipath, p, parts, count, names);
            free(ipath);
        }
    }
    if (names)
        for (uint32_t k = 0; k < count; k++) {
            if (rc && names[k]) unlink(names[k]); /* a failed set leaves none of its parts */
            free(names[k]);
        }
    free(names);
    free(parts);
    return rc;
}

/* Whether the filesystem OUT goes to has `size` bytes free for an unprivileged writer
 * (statvfs's f_bavail), the bytes of a file OUT replaces counted as free; false after one line
 * on stderr. Where statvfs cannot say (an odd filesystem), the write goes ahead: a failure is
 * still caught and its partial file removed. */
static bool room_for(const char *out, uint64_t size) {
    char dir[4096];
    const char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == out ? 1 : (int)(slash - out), out);
    struct statvfs fs;
    if (statvfs(dir, &fs) != 0) return true;
    uint64_t avail = (uint64_t)fs.f_bavail * fs.f_frsize;
    struct stat st;
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) avail += (uint64_t)st.st_size;
    if (size <= avail) return true;
    char need[32], have[32];
    fprintf(stderr,
            "weightmap: %s: not enough free space: the model needs %s, the filesystem of %s has "
            "%s free (nothing was written)\n",
            out, cli_bytes(size, need), dir, cli_bytes(avail, have));
    return false;
}

/* Writes the model: one file, or `shards` parts (and a safetensors index). 0, or 1 after one
 * line on stderr. */
static int make_model(const char *out, uint64_t size, uint64_t seed, bool st, uint64_t shards) {
    model_plan p = {0};
    if (!plan(size, st, &p)) {
        char want[32];
        fprintf(stderr,
                "weightmap: %s: --size %llu is too small for a llama-shaped model: the smallest "
                "%s model is %llu bytes (%s)\n",
                out, (unsigned long long)size, st ? "safetensors" : "GGUF",
                (unsigned long long)min_size(st), cli_bytes(min_size(st), want));
        return 1;
    }
    if (shards > p.n) {
        free(p.t);
        fprintf(stderr, "weightmap: %s: --shards %llu is more than the %zu tensors\n", out,
                (unsigned long long)shards, p.n);
        return 1;
    }
    if (!room_for(out, size)) {
        free(p.t);
        return 1;
    }
    int rc = 0;
    if (shards == 0) {
        part whole = {0, p.n, 0, 0};
        rc = st ? write_safetensors(out, &p, &whole, seed) : write_gguf(out, &p, &whole, seed);
        free(p.t);
        return rc;
    }
    rc = write_set(out, &p, st, (uint32_t)shards, seed);
    free(p.t);
    return rc;
}

int cli_make_default_model(const char *path, uint64_t size) {
    return make_model(path, size, 0, false, 0);
}

int cmd_make_model(int argc, char **argv) {
    const char *out = NULL, *format = NULL;
    uint64_t size = 0, seed = 0, shards = 0;
    cli_args p;
    cli_args_init(&p, "make-model", argc, argv);
    for (int k; (k = cli_next(&p)) != CLI_END;) {
        if (k == CLI_ERROR) return 2;
        if (k == CLI_ARG) {
            if (out) return cli_usage("make-model: one OUT only");
            out = p.value;
        } else if (cli_is(&p, "format")) {
            format = p.value;
        } else if ((cli_is(&p, "size") && cli_value_u64(&p, &size)) ||
                   (cli_is(&p, "seed") && cli_value_u64(&p, &seed)) ||
                   (cli_is(&p, "shards") && cli_value_u64(&p, &shards))) {
            return 2;
        }
    }
    if (!out || !size) return cli_usage("make-model: OUT and --size BYTES are required");
    if (!format) { /* by OUT's extension; GGUF otherwise */
        size_t ol = strlen(out);
        format = ol >= 12 && !strcmp(out + ol - 12, ".safetensors") ? "safetensors" : "gguf";
    }
    bool st = !strcmp(format, "safetensors");
    if (!st && strcmp(format, "gguf") != 0)
        return cli_usage("make-model: bad --format '%s': expected gguf or safetensors", format);
    return make_model(out, size, seed, st, shards);
}
