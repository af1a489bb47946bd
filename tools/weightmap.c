/*
 * weightmap.c: the command-line tool. Uses only the public header.
 *
 * Sections: output helpers (JSON strings, sizes); `info` (with `--as TYPE`, the sizes tensors
 * would take converted); `make-model` (tools/makemodel.c); command dispatch. Exit codes: 0
 * success, 1 the file or the run failed (one line on stderr: "weightmap: FILE: what is wrong"),
 * 2 usage error.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- output helpers ---- */

void cli_json_string(FILE *out, const char *s, size_t n) {
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (c < 0x20)
                fprintf(out, "\\u%04x", c);
            else
                fputc(c, out);
        }
    }
    fputc('"', out);
}

void cli_json_cstr(FILE *out, const char *s) { cli_json_string(out, s, strlen(s)); }

const char *cli_bytes(uint64_t b, char buf[32]) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    if (i == 0)
        snprintf(buf, 32, "%" PRIu64 " B", b);
    else
        snprintf(buf, 32, "%.1f %s", v, u[i]);
    return buf;
}

int cli_fail(const wm_error *err) {
    fprintf(stderr, "weightmap: %s\n", err->msg);
    return 1;
}

int cli_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("weightmap: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(see weightmap --help)\n", stderr);
    va_end(ap);
    return 2;
}

wm_type cli_target_type(const char *name) {
    wm_type t = wm_type_from_name(name);
    return t != WM_TYPE_INVALID && wm_convert_supported(t, t) ? t : WM_TYPE_INVALID;
}

bool cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || s[0] == '-') return false;
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024ull * 1024 * 1024, end++;
    if (*end == 'i' || *end == 'B') end++;
    if (*end == 'B') end++;
    if (*end) return false;
    if (v > UINT64_MAX / mul) return false;
    *out = v * mul;
    return true;
}

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
    default:
        wm_file_kv_u64(f, i, &u);
        fprintf(out, "%" PRIu64, u);
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

static int cmd_info(int argc, char **argv) {
    bool json = false, full = false;
    const char *path = NULL, *as = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = true;
        else if (strcmp(argv[i], "--metadata") == 0) full = true;
        else if (strcmp(argv[i], "--as") == 0) {
            if (++i >= argc) return cli_usage("info: --as needs a type (" CLI_TARGETS ")");
            as = argv[i];
        } else if (strncmp(argv[i], "--as=", 5) == 0) as = argv[i] + 5;
        else if (argv[i][0] == '-') return cli_usage("info: unknown option %s", argv[i]);
        else if (!path) path = argv[i];
        else return cli_usage("info: one FILE only");
    }
    if (!path) return cli_usage("info: FILE missing");
    wm_type to = WM_TYPE_INVALID;
    if (as) {
        to = cli_target_type(as);
        if (to == WM_TYPE_INVALID)
            return cli_usage("info: --as %s: not a type tensors convert to (" CLI_TARGETS ")", as);
    }
    wm_file *f;
    wm_error err;
    if (wm_file_open(path, &f, &err) != WM_OK) return cli_fail(&err);

    size_t nt = wm_file_tensor_count(f), nk = wm_file_metadata_count(f);
    uint64_t by_type_bytes[256] = {0}, by_type_n[256] = {0}, by_type_as[256] = {0};
    uint64_t total_as = 0, n_kept = 0;
    for (size_t i = 0; i < nt; i++) {
        wm_tensor_info t;
        bool kept = false;
        wm_file_tensor(f, i, &t);
        unsigned k = (unsigned)t.type & 255;
        by_type_bytes[k] += t.nbytes;
        by_type_n[k]++;
        if (as) {
            uint64_t b = size_as(&t, to, &kept);
            by_type_as[k] += b;
            total_as += b;
            n_kept += kept;
        }
    }
    const char *to_name = as ? wm_type_name(to) : "";
    FILE *out = stdout;
    if (json) {
        fputs("{\"file\": ", out);
        cli_json_cstr(out, path);
        fprintf(out,
                ", \"format\": \"%s\", \"version\": %u, \"size\": %" PRIu64
                ", \"alignment\": %u, \"data_offset\": %" PRIu64 ", \"n_tensors\": %zu, "
                "\"n_metadata\": %zu, \"tensor_bytes\": %" PRIu64,
                wm_format_name(wm_file_format(f)), wm_file_version(f), wm_file_size(f),
                wm_file_alignment(f), wm_file_data_offset(f), nt, nk, wm_file_tensor_bytes(f));
        if (as)
            fprintf(out, ", \"as\": \"%s\", \"tensor_bytes_as\": %" PRIu64 ", \"n_kept\": %" PRIu64,
                    to_name, total_as, n_kept);
        fputs(", \"shards\": [", out);
        for (uint32_t i = 0; i < wm_file_shard_count(f); i++) {
            fputs(i ? ", " : "", out);
            cli_json_cstr(out, wm_file_shard_path(f, i));
        }
        fputs("], \"metadata\": {", out);
        for (size_t i = 0; i < nk; i++) {
            wm_kv kv;
            wm_file_metadata(f, i, &kv);
            fputs(i ? ", " : "", out);
            cli_json_cstr(out, kv.key);
            fputs(": ", out);
            print_value(out, f, i, &kv, true, full);
        }
        fputs("}, \"tensors\": [", out);
        for (size_t i = 0; i < nt; i++) {
            wm_tensor_info t;
            wm_file_tensor(f, i, &t);
            fputs(i ? ", {\"name\": " : "{\"name\": ", out);
            cli_json_cstr(out, t.name);
            fprintf(out, ", \"type\": \"%s\", \"shape\": [", wm_type_name(t.type));
            for (uint32_t d = 0; d < t.n_dims; d++)
                fprintf(out, "%s%" PRIu64, d ? ", " : "", t.shape[d]);
            fprintf(out, "], \"offset\": %" PRIu64 ", \"nbytes\": %" PRIu64 ", \"shard\": %u",
                    t.offset, t.nbytes, t.shard);
            if (as) {
                bool kept;
                uint64_t b = size_as(&t, to, &kept);
                fprintf(out, ", \"nbytes_as\": %" PRIu64 ", \"kept\": %s", b,
                        kept ? "true" : "false");
            }
            fputc('}', out);
        }
        fputs("], \"by_type\": {", out);
        bool first = true;
        for (unsigned k = 0; k < 256; k++) {
            if (!by_type_n[k]) continue;
            fprintf(out, "%s\"%s\": {\"tensors\": %" PRIu64 ", \"bytes\": %" PRIu64,
                    first ? "" : ", ", wm_type_name((wm_type)k), by_type_n[k], by_type_bytes[k]);
            if (as) fprintf(out, ", \"bytes_as\": %" PRIu64, by_type_as[k]);
            fputc('}', out);
            first = false;
        }
        fputs("}}\n", out);
    } else {
        char b1[32], b2[32];
        fprintf(out, "file:        %s\n", path);
        fprintf(out, "format:      %s v%u\n", wm_format_name(wm_file_format(f)), wm_file_version(f));
        fprintf(out, "size:        %" PRIu64 " bytes (%s)\n", wm_file_size(f),
                cli_bytes(wm_file_size(f), b1));
        fprintf(out, "alignment:   %u\n", wm_file_alignment(f));
        fprintf(out, "data offset: %" PRIu64 "\n", wm_file_data_offset(f));
        if (wm_file_shard_count(f) > 1)
            for (uint32_t i = 0; i < wm_file_shard_count(f); i++)
                fprintf(out, "%s %u/%u %s\n", i ? "            " : "shards:     ", i + 1,
                        wm_file_shard_count(f), wm_file_shard_path(f, i));
        fprintf(out, "tensors:     %zu (%s)\n", nt, cli_bytes(wm_file_tensor_bytes(f), b2));
        if (as) {
            char label[16];
            snprintf(label, sizeof label, "as %s:", to_name);
            fprintf(out, "%-12s %" PRIu64 " bytes (%s) from %" PRIu64 " stored", label, total_as,
                    cli_bytes(total_as, b1), wm_file_tensor_bytes(f));
            if (n_kept) fprintf(out, "; %" PRIu64 " tensors kept as stored", n_kept);
            fputc('\n', out);
        }
        fprintf(out, "metadata:    %zu\n\n", nk);
        for (size_t i = 0; i < nk; i++) {
            wm_kv kv;
            wm_file_metadata(f, i, &kv);
            fprintf(out, "  %-40s %-7s ", kv.key, wm_value_type_name(kv.type));
            print_value(out, f, i, &kv, false, full);
            fputc('\n', out);
        }
        if (nt) {
            char as_head[16];
            snprintf(as_head, sizeof as_head, "as %s", to_name);
            fprintf(out, "\n  %-40s %-8s %-24s %14s %12s", "tensor", "type", "shape", "offset",
                    "bytes");
            if (as) fprintf(out, " %12s", as_head);
            fputc('\n', out);
            for (size_t i = 0; i < nt; i++) {
                wm_tensor_info t;
                wm_file_tensor(f, i, &t);
                char shape[64] = "";
                size_t n = 0;
                for (uint32_t d = 0; d < t.n_dims && n < sizeof shape; d++)
                    n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%" PRIu64, d ? " x " : "",
                                          t.shape[d]);
                fprintf(out, "  %-40s %-8s %-24s %14" PRIu64 " %12" PRIu64, t.name,
                        wm_type_name(t.type), shape, t.offset, t.nbytes);
                if (as) {
                    bool kept;
                    uint64_t b = size_as(&t, to, &kept);
                    fprintf(out, " %12" PRIu64 "%s", b, kept ? " (kept)" : "");
                }
                fputc('\n', out);
            }
            fputs("\n  by type:\n", out);
            for (unsigned k = 0; k < 256; k++) {
                if (!by_type_n[k]) continue;
                fprintf(out, "  %-8s %5" PRIu64 " tensors %14" PRIu64 " bytes (%s)",
                        wm_type_name((wm_type)k), by_type_n[k], by_type_bytes[k],
                        cli_bytes(by_type_bytes[k], b1));
                if (as) {
                    bool kept = !wm_convert_supported((wm_type)k, to);
                    fprintf(out, " -> %14" PRIu64 " bytes as %s (%s)%s", by_type_as[k], to_name,
                            cli_bytes(by_type_as[k], b2), kept ? " (kept)" : "");
                }
                fputc('\n', out);
            }
        }
    }
    wm_file_close(f);
    return 0;
}

/* ---- dispatch ---- */

static void help(FILE *out) {
    fputs("usage: weightmap COMMAND [ARGS]\n\n"
          "  info FILE [--json] [--metadata] [--as f32|f16|bf16|f64]\n"
          "                                       what is in a weight file; --as: sizes converted\n"
          "  load FILE --mode M [options]         load, touch, release; figures per cycle\n"
          "  check FILE [--cycles N] [--json]     every mode: is every byte returned?\n"
          "  probe [--pid P] [--file F] [--json]  memory figures and weight-file regions\n"
          "  make-model OUT --size BYTES [--seed N] [--format gguf|safetensors] [--shards N]\n"
          "                                       a deterministic llama-shaped model\n"
          "  demo                                 check on the built-in default model\n"
          "  cat FILE TENSOR [--as f32|f16|bf16|f64]\n"
          "                                       one tensor's bytes to stdout, converted if asked\n"
          "\nexit codes: 0 success, 1 the file or the run failed, 2 usage error\n",
          out);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        help(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        help(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("weightmap %s\n", wm_version());
        return 0;
    }
    if (!strcmp(cmd, "info")) return cmd_info(argc - 2, argv + 2);
    if (!strcmp(cmd, "make-model")) return cmd_make_model(argc - 2, argv + 2);
    for (const cli_command *c = cli_commands; c->name; c++)
        if (!strcmp(cmd, c->name)) return c->fn(argc - 2, argv + 2);
    return cli_usage("unknown command '%s'", cmd);
}
