/*
 * info.c: `weightmap info FILE [--json] [--metadata] [--as TYPE]`: what is in a weight file, and
 * with --as the sizes its tensors would take converted. One pass gathers the totals, then one
 * walk over the sections drives either printer (text or JSON).
 */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- info ---- */

static void print_value(FILE *out, const wm_file *f, size_t i, const wm_kv *kv, bool json,
                        bool full) {
    wm_string s;
    uint64_t u;
    int64_t v;
    double d;
    switch (kv->type) {
    case WM_VALUE_STRING:
        wm_file_kv_string(f, i, &s);
        if (json)
            cli_json_string(out, s.ptr, s.len);
        else
            fprintf(out, "%.*s", (int)(s.len > 200 && !full ? 200 : s.len), s.ptr);
        break;
    case WM_VALUE_BOOL: {
        int b = 0;
        wm_file_get_bool(f, kv->key, &b);
        fputs(b ? "true" : "false", out);
        break;
    }
    case WM_VALUE_F32:
    case WM_VALUE_F64:
        wm_file_kv_f64(f, i, &d);
        fprintf(out, "%.9g", d);
        break;
    case WM_VALUE_I8:
    case WM_VALUE_I16:
    case WM_VALUE_I32:
    case WM_VALUE_I64:
        wm_file_kv_i64(f, i, &v);
        fprintf(out, "%" PRId64, v);
        break;
    case WM_VALUE_ARRAY: {
        bool summarise = !full && kv->length > 16;
        if (summarise || kv->elem_type == WM_VALUE_ARRAY) {
            if (json)
                fprintf(out, "{\"array\": \"%s\", \"length\": %" PRIu64 "}",
                        wm_value_type_name(kv->elem_type), kv->length);
            else
                fprintf(out, "[%s x %" PRIu64 "]", wm_value_type_name(kv->elem_type), kv->length);
            break;
        }
        fputc('[', out);
        wm_array_iter it;
        bool strs = wm_file_array_iter(f, i, &it) == WM_OK;
        for (uint64_t e = 0; e < kv->length; e++) {
            if (e) fputs(", ", out);
            if (strs) {
                wm_array_iter_next(&it, &s);
                if (json)
                    cli_json_string(out, s.ptr, s.len);
                else
                    fprintf(out, "\"%.*s\"", (int)s.len, s.ptr);
            } else if (wm_file_array_i64(f, i, e, &v) == WM_OK) {
                fprintf(out, "%" PRId64, v);
            } else if (wm_file_array_u64(f, i, e, &u) == WM_OK) {
                fprintf(out, "%" PRIu64, u);
            } else if (wm_file_array_f64(f, i, e, &d) == WM_OK) {
                fprintf(out, "%.9g", d);
            } else {
                fputs("null", out);
            }
        }
        fputc(']', out);
        break;
    }
    default: wm_file_kv_u64(f, i, &u); fprintf(out, "%" PRIu64, u);
    }
}

/* The bytes tensor t would take converted to `to`: its elements in whole blocks of `to`. A tensor
 * whose type cannot convert to `to` keeps its stored size, and *kept says so. */
static uint64_t size_as(const wm_tensor_info *t, wm_type to, bool *kept) {
    *kept = !wm_convert_supported(t->type, to);
    if (*kept || t->type == to) return t->nbytes;
    uint64_t be = wm_type_block_elems(to);
    return (t->n_elements + be - 1) / be * wm_type_block_bytes(to);
}

/* One `info` run: the open file, the options and the figures gathered in one pass over the
 * tensors before anything is printed (the totals come first in both outputs). */
typedef struct info_run {
    FILE *out;
    const char *path;
    wm_file *f;
    bool json, full;
    bool as; /* --as given: sizes converted to `to` are printed too */
    wm_type to;
    const char *to_name;
    size_t nt, nk;
    uint64_t total_as, n_kept;
    uint64_t by_type_bytes[256], by_type_n[256], by_type_as[256];
} info_run;

/* The sections of the output, in order: the same walk drives the text and the JSON printer. */
typedef enum {
    INFO_HEAD,
    INFO_SHARDS,
    INFO_METADATA,
    INFO_TENSORS,
    INFO_BY_TYPE,
    INFO_END
} info_section;

/* A printer: `section` opens each section (and INFO_END closes the output); the row functions
 * print one shard, one metadata entry, one tensor (with its size as `to`, when --as) and one
 * element type's totals (first: no row before it in that section). */
typedef struct info_printer {
    void (*section)(const info_run *r, info_section s);
    void (*shard)(const info_run *r, uint32_t i);
    void (*kv)(const info_run *r, size_t i, const wm_kv *kv);
    void (*tensor)(const info_run *r, size_t i, const wm_tensor_info *t, uint64_t bytes_as,
                   bool kept);
    void (*type_row)(const info_run *r, unsigned k, bool first);
} info_printer;

/* -- JSON -- */

static void json_section(const info_run *r, info_section s) {
    FILE *out = r->out;
    wm_file *f = r->f;
    switch (s) {
    case INFO_HEAD:
        fputs("{\"file\": ", out);
        cli_json_cstr(out, r->path);
        fprintf(out,
                ", \"format\": \"%s\", \"version\": %u, \"size\": %" PRIu64
                ", \"alignment\": %u, \"data_offset\": %" PRIu64 ", \"n_tensors\": %zu, "
                "\"n_metadata\": %zu, \"tensor_bytes\": %" PRIu64,
                wm_format_name(wm_file_format(f)), wm_file_version(f), wm_file_size(f),
                wm_file_alignment(f), wm_file_data_offset(f), r->nt, r->nk,
                wm_file_tensor_bytes(f));
        if (r->as)
            fprintf(out, ", \"as\": \"%s\", \"tensor_bytes_as\": %" PRIu64 ", \"n_kept\": %" PRIu64,
                    r->to_name, r->total_as, r->n_kept);
        break;
    case INFO_SHARDS: fputs(", \"shards\": [", out); break;
    case INFO_METADATA: fputs("], \"metadata\": {", out); break;
    case INFO_TENSORS: fputs("}, \"tensors\": [", out); break;
    case INFO_BY_TYPE: fputs("], \"by_type\": {", out); break;
    case INFO_END: fputs("}}\n", out); break;
    }
}

static void json_shard(const info_run *r, uint32_t i) {
    fputs(i ? ", " : "", r->out);
    cli_json_cstr(r->out, wm_file_shard_path(r->f, i));
}

static void json_kv(const info_run *r, size_t i, const wm_kv *kv) {
    fputs(i ? ", " : "", r->out);
    cli_json_cstr(r->out, kv->key);
    fputs(": ", r->out);
    print_value(r->out, r->f, i, kv, true, r->full);
}

static void json_tensor(const info_run *r, size_t i, const wm_tensor_info *t, uint64_t bytes_as,
                        bool kept) {
    FILE *out = r->out;
    fputs(i ? ", {\"name\": " : "{\"name\": ", out);
    cli_json_cstr(out, t->name);
    fprintf(out, ", \"type\": \"%s\", \"shape\": [", wm_type_name(t->type));
    for (uint32_t d = 0; d < t->n_dims; d++)
        fprintf(out, "%s%" PRIu64, d ? ", " : "", t->shape[d]);
    fprintf(out, "], \"offset\": %" PRIu64 ", \"nbytes\": %" PRIu64 ", \"shard\": %u", t->offset,
            t->nbytes, t->shard);
    if (r->as)
        fprintf(out, ", \"nbytes_as\": %" PRIu64 ", \"kept\": %s", bytes_as,
                kept ? "true" : "false");
    fputc('}', out);
}

static void json_type_row(const info_run *r, unsigned k, bool first) {
    fprintf(r->out, "%s\"%s\": {\"tensors\": %" PRIu64 ", \"bytes\": %" PRIu64, first ? "" : ", ",
            wm_type_name((wm_type)k), r->by_type_n[k], r->by_type_bytes[k]);
    if (r->as) fprintf(r->out, ", \"bytes_as\": %" PRIu64, r->by_type_as[k]);
    fputc('}', r->out);
}

static const info_printer json_printer = {json_section, json_shard, json_kv, json_tensor,
                                          json_type_row};

/* -- text -- */

static void text_section(const info_run *r, info_section s) {
    FILE *out = r->out;
    wm_file *f = r->f;
    char b1[32], b2[32];
    switch (s) {
    case INFO_HEAD:
        fprintf(out, "file:        %s\n", r->path);
        fprintf(out, "format:      %s v%u\n", wm_format_name(wm_file_format(f)),
                wm_file_version(f));
        fprintf(out, "size:        %" PRIu64 " bytes (%s)\n", wm_file_size(f),
                cli_bytes(wm_file_size(f), b1));
        fprintf(out, "alignment:   %u\n", wm_file_alignment(f));
        fprintf(out, "data offset: %" PRIu64 "\n", wm_file_data_offset(f));
        break;
    case INFO_SHARDS: break;
    case INFO_METADATA:
        /* the counts stand between the shard list and the metadata */
        fprintf(out, "tensors:     %zu (%s)\n", r->nt, cli_bytes(wm_file_tensor_bytes(f), b2));
        if (r->as) {
            char label[16];
            snprintf(label, sizeof label, "as %s:", r->to_name);
            fprintf(out, "%-12s %" PRIu64 " bytes (%s) from %" PRIu64 " stored", label, r->total_as,
                    cli_bytes(r->total_as, b1), wm_file_tensor_bytes(f));
            if (r->n_kept) fprintf(out, "; %" PRIu64 " tensors kept as stored", r->n_kept);
            fputc('\n', out);
        }
        fprintf(out, "metadata:    %zu\n\n", r->nk);
        break;
    case INFO_TENSORS:
        if (!r->nt) break;
        char as_head[16];
        snprintf(as_head, sizeof as_head, "as %s", r->to_name);
        fprintf(out, "\n  %-40s %-8s %-24s %14s %12s", "tensor", "type", "shape", "offset",
                "bytes");
        if (r->as) fprintf(out, " %12s", as_head);
        fputc('\n', out);
        break;
    case INFO_BY_TYPE:
        if (r->nt) fputs("\n  by type:\n", out);
        break;
    case INFO_END: break;
    }
}

static void text_shard(const info_run *r, uint32_t i) {
    uint32_t n = wm_file_shard_count(r->f);
    if (n > 1)
        fprintf(r->out, "%s %u/%u %s\n", i ? "            " : "shards:     ", i + 1, n,
                wm_file_shard_path(r->f, i));
}

static void text_kv(const info_run *r, size_t i, const wm_kv *kv) {
    fprintf(r->out, "  %-40s %-7s ", kv->key, wm_value_type_name(kv->type));
    print_value(r->out, r->f, i, kv, false, r->full);
    fputc('\n', r->out);
}

static void text_tensor(const info_run *r, size_t i, const wm_tensor_info *t, uint64_t bytes_as,
                        bool kept) {
    (void)i;
    char shape[64] = "";
    size_t n = 0;
    for (uint32_t d = 0; d < t->n_dims && n < sizeof shape; d++)
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%" PRIu64, d ? " x " : "",
                              t->shape[d]);
    fprintf(r->out, "  %-40s %-8s %-24s %14" PRIu64 " %12" PRIu64, t->name, wm_type_name(t->type),
            shape, t->offset, t->nbytes);
    if (r->as) fprintf(r->out, " %12" PRIu64 "%s", bytes_as, kept ? " (kept)" : "");
    fputc('\n', r->out);
}

static void text_type_row(const info_run *r, unsigned k, bool first) {
    (void)first;
    char b1[32], b2[32];
    fprintf(r->out, "  %-8s %5" PRIu64 " tensors %14" PRIu64 " bytes (%s)",
            wm_type_name((wm_type)k), r->by_type_n[k], r->by_type_bytes[k],
            cli_bytes(r->by_type_bytes[k], b1));
    if (r->as) {
        bool kept = !wm_convert_supported((wm_type)k, r->to);
        fprintf(r->out, " -> %14" PRIu64 " bytes as %s (%s)%s", r->by_type_as[k], r->to_name,
                cli_bytes(r->by_type_as[k], b2), kept ? " (kept)" : "");
    }
    fputc('\n', r->out);
}

static const info_printer text_printer = {text_section, text_shard, text_kv, text_tensor,
                                          text_type_row};

/* -- the walk -- */

/* The totals per element type (and as `to`), which both outputs print before the tensors. */
static void info_totals(info_run *r) {
    for (size_t i = 0; i < r->nt; i++) {
        wm_tensor_info t;
        bool kept = false;
        wm_file_tensor(r->f, i, &t);
        unsigned k = (unsigned)t.type & 255;
        r->by_type_bytes[k] += t.nbytes;
        r->by_type_n[k]++;
        if (r->as) {
            uint64_t b = size_as(&t, r->to, &kept);
            r->by_type_as[k] += b;
            r->total_as += b;
            r->n_kept += kept;
        }
    }
}

static void info_walk(const info_run *r, const info_printer *p) {
    p->section(r, INFO_HEAD);
    p->section(r, INFO_SHARDS);
    for (uint32_t i = 0; i < wm_file_shard_count(r->f); i++)
        p->shard(r, i);
    p->section(r, INFO_METADATA);
    for (size_t i = 0; i < r->nk; i++) {
        wm_kv kv;
        wm_file_metadata(r->f, i, &kv);
        p->kv(r, i, &kv);
    }
    p->section(r, INFO_TENSORS);
    for (size_t i = 0; i < r->nt; i++) {
        wm_tensor_info t;
        bool kept = false;
        wm_file_tensor(r->f, i, &t);
        uint64_t b = r->as ? size_as(&t, r->to, &kept) : 0;
        p->tensor(r, i, &t, b, kept);
    }
    p->section(r, INFO_BY_TYPE);
    bool first = true;
    for (unsigned k = 0; k < 256; k++) {
        if (!r->by_type_n[k]) continue;
        p->type_row(r, k, first);
        first = false;
    }
    p->section(r, INFO_END);
}

int cmd_info(int argc, char **argv) {
    static info_run r; /* 6 KiB of totals: not on the stack */
    memset(&r, 0, sizeof r);
    const char *as = NULL;
    bool set = false;
    cli_args p;
    cli_args_init(&p, "info", argc, argv);
    for (int k; (k = cli_next(&p)) != CLI_END;) {
        if (k == CLI_ERROR) return 2;
        if (k == CLI_ARG) {
            if (r.path) return cli_usage("info: one FILE only");
            r.path = p.value;
        } else if (cli_is(&p, "json")) {
            r.json = true;
        } else if (cli_is(&p, "metadata")) {
            r.full = true;
        } else if (cli_is(&p, "set")) {
            set = true;
        } else if (cli_is(&p, "as")) {
            as = p.value;
        }
    }
    if (!r.path) return cli_usage("info: FILE missing");
    r.to = WM_TYPE_INVALID;
    r.to_name = "";
    if (as) {
        r.to = cli_target_type(as);
        if (r.to == WM_TYPE_INVALID)
            return cli_usage("info: --as %s: not a type tensors convert to (" CLI_TARGETS ")", as);
        r.as = true;
        r.to_name = wm_type_name(r.to);
    }
    wm_error err;
    if (cli_open(r.path, set, &r.f, &err) != WM_OK) return cli_fail(&err);
    r.out = stdout;
    r.nt = wm_file_tensor_count(r.f);
    r.nk = wm_file_metadata_count(r.f);
    info_totals(&r);
    info_walk(&r, r.json ? &json_printer : &text_printer);
    wm_file_close(r.f);
    return 0;
}
