/*
 * makemodel.c: `weightmap make-model OUT --size BYTES [--seed N] [--format gguf|safetensors]`.
 *
 * Writes a deterministic llama-shaped model that llama.cpp accepts: token_embd (F16), per block
 * attn_norm/ffn_norm (F32), attn_q/k/v/output (Q8_0), ffn_gate/up/down (Q4_0), output_norm
 * (F32), output (Q8_0), with llama.* hyper-parameters and a tokenizer (tokens, scores, types).
 * The same arguments give the same bytes: all data comes from a splitmix64 stream seeded by
 * --seed, and nothing depends on time, locale or the machine. The size is an upper bound that
 * the shapes approach: widths and the layer count are picked to fill it.
 *
 * Sections: the plan (shapes from the size), the GGUF writer, the safetensors writer, data.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

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

static bool plan(uint64_t size, model_plan *p) {
    static const uint32_t widths[] = {4096, 2048, 1024, 512, 256, 128, 64};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        uint32_t e = widths[w];
        uint32_t ff = (e * 8 / 3 + 255) / 256 * 256;
        uint32_t vocab = e >= 1024 ? 32000 : e * 32;
        uint64_t fixed = tbytes(WM_TYPE_F16, e, vocab) + tbytes(WM_TYPE_Q8_0, e, vocab) + 4ull * e +
                         (uint64_t)vocab * 24 + 65536;
        uint64_t layer = 4 * tbytes(WM_TYPE_Q8_0, e, e) + 3 * tbytes(WM_TYPE_Q4_0, e, ff) + 8ull * e;
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
            L("attn_q.weight", WM_TYPE_Q8_0, e, e);
            L("attn_k.weight", WM_TYPE_Q8_0, e, e);
            L("attn_v.weight", WM_TYPE_Q8_0, e, e);
            L("attn_output.weight", WM_TYPE_Q8_0, e, e);
            L("ffn_norm.weight", WM_TYPE_F32, e, 1);
            L("ffn_gate.weight", WM_TYPE_Q4_0, e, ff);
            L("ffn_up.weight", WM_TYPE_Q4_0, e, ff);
            L("ffn_down.weight", WM_TYPE_Q4_0, ff, e);
#undef L
        }
        add(p, "output_norm.weight", WM_TYPE_F32, e, 1);
        add(p, "output.weight", WM_TYPE_Q8_0, e, vocab);
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
                uint16_t h = rand_half(x >> (k * 16) | (x << (64 - k * 16)));
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
        while (c < b->len + n) c *= 2;
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

static int write_data(FILE *fp, const model_plan *p, uint64_t seed, uint64_t data_start,
                      const char *out) {
    size_t chunk = 1 << 20;
    unsigned char *buf = malloc(chunk);
    if (!buf) return 1;
    uint64_t pos = data_start;
    for (size_t i = 0; i < p->n; i++) {
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
                fprintf(stderr, "weightmap: %s: write failed\n", out);
                return 1;
            }
            done += k;
            pos += k;
        }
    }
    free(buf);
    return 0;
}

static int write_gguf(const char *out, const model_plan *p, uint64_t seed) {
    out_buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, p->n);
    size_t n_kv_at = b.len;
    put_u64(&b, 0); /* patched below */
    kv_str(&b, "general.architecture", "llama");
    kv_str(&b, "general.name", "weightmap-default");
    kv_u32(&b, "general.alignment", 32);
    kv_u32(&b, "llama.context_length", 2048);
    kv_u32(&b, "llama.embedding_length", p->n_embd);
    kv_u32(&b, "llama.block_count", p->n_layer);
    kv_u32(&b, "llama.feed_forward_length", p->n_ff);
    kv_u32(&b, "llama.attention.head_count", p->n_head);
    kv_u32(&b, "llama.attention.head_count_kv", p->n_head);
    kv_u32(&b, "llama.rope.dimension_count", p->n_embd / p->n_head);
    kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_str(&b, "tokenizer.ggml.model", "llama");
    kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(&b, "tokenizer.ggml.eos_token_id", 2);
    /* tokens: <unk> <s> </s>, the 256 byte tokens, then words */
    put_str(&b, "tokenizer.ggml.tokens");
    put_u32(&b, WM_VALUE_ARRAY);
    put_u32(&b, WM_VALUE_STRING);
    put_u64(&b, p->n_vocab);
    for (uint32_t i = 0; i < p->n_vocab; i++) {
        char tok[32];
        if (i == 0) snprintf(tok, sizeof tok, "<unk>");
        else if (i == 1) snprintf(tok, sizeof tok, "<s>");
        else if (i == 2) snprintf(tok, sizeof tok, "</s>");
        else if (i < 3 + 256) snprintf(tok, sizeof tok, "<0x%02X>", i - 3);
        else snprintf(tok, sizeof tok, "\xe2\x96\x81t%u", i);
        put_str(&b, tok);
    }
    put_str(&b, "tokenizer.ggml.scores");
    put_u32(&b, WM_VALUE_ARRAY);
    put_u32(&b, WM_VALUE_F32);
    put_u64(&b, p->n_vocab);
    for (uint32_t i = 0; i < p->n_vocab; i++) {
        float s = -(float)i;
        put(&b, &s, 4);
    }
    put_str(&b, "tokenizer.ggml.token_type");
    put_u32(&b, WM_VALUE_ARRAY);
    put_u32(&b, WM_VALUE_I32);
    put_u64(&b, p->n_vocab);
    for (uint32_t i = 0; i < p->n_vocab; i++) {
        int32_t ty = i == 0 ? 2 : i < 3 ? 3 : i < 3 + 256 ? 6 : 1;
        put(&b, &ty, 4);
    }
    if (!b.oom) {
        uint64_t n_kv = 17;
        memcpy(b.p + n_kv_at, &n_kv, 8);
    }
    for (size_t i = 0; i < p->n; i++) {
        const tensor_plan *t = &p->t[i];
        put_str(&b, t->name);
        put_u32(&b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&b, t->ne[d]);
        put_u32(&b, (uint32_t)t->type);
        put_u64(&b, t->offset);
    }
    if (b.oom) {
        free(b.p);
        fprintf(stderr, "weightmap: %s: out of memory\n", out);
        return 1;
    }
    uint64_t data_start = (b.len + 31) / 32 * 32;
    static const unsigned char zero[32];
    put(&b, zero, (size_t)(data_start - b.len));
    FILE *fp = fopen(out, "wb");
    if (!fp) {
        free(b.p);
        fprintf(stderr, "weightmap: %s: cannot create: %s\n", out, strerror(errno));
        return 1;
    }
    int rc = fwrite(b.p, 1, b.len, fp) == b.len ? 0 : 1;
    free(b.p);
    if (!rc) rc = write_data(fp, p, seed, data_start, out);
    if (fclose(fp) != 0) rc = 1;
    if (rc) fprintf(stderr, "weightmap: %s: write failed\n", out);
    return rc;
}

int cmd_make_model(int argc, char **argv) {
    const char *out = NULL, *format = "gguf";
    uint64_t size = 0, seed = 0;
    bool have_size = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc) {
            if (!cli_parse_u64(argv[++i], &size)) return cli_usage("make-model: bad --size '%s'", argv[i]);
            have_size = true;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            if (!cli_parse_u64(argv[++i], &seed)) return cli_usage("make-model: bad --seed '%s'", argv[i]);
        } else if (!strcmp(argv[i], "--format") && i + 1 < argc) {
            format = argv[++i];
        } else if (argv[i][0] == '-') {
            return cli_usage("make-model: unknown option %s", argv[i]);
        } else if (!out) {
            out = argv[i];
        } else {
            return cli_usage("make-model: one OUT only");
        }
    }
    if (!out || !have_size) return cli_usage("make-model: OUT and --size BYTES are required");
    if (strcmp(format, "gguf") != 0) return cli_usage("make-model: unknown --format '%s'", format);
    model_plan p = {0};
    if (!plan(size, &p)) {
        fprintf(stderr, "weightmap: %s: --size %llu is too small for a llama-shaped model\n", out,
                (unsigned long long)size);
        return 1;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < p.n; i++) {
        p.t[i].offset = off;
        off = (off + p.t[i].nbytes + 31) / 32 * 32;
    }
    int rc = write_gguf(out, &p, seed);
    free(p.t);
    return rc;
}
