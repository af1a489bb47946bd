/*
 * parse.c: the parse benchmark. Opens and closes GGUF files with weightmap (wm_file_open +
 * wm_file_close) and with llama.cpp (gguf_init_from_file with no_alloc=true, ctx=NULL, then
 * gguf_free), alternating the two in one run so both see the same warm page cache, and prints
 * a markdown table: median, p10 and p90 of each, and the ratio of the medians.
 *
 * Sections: options; one timed open of each side; the per-file loop; main.
 *
 * Usage: parse [-n N] [--peer DIR] [FILE...]
 *        parse --make-vocab OUT [N_TOKENS]
 *        parse --process CLI [-n N] [--peer DIR] FILE
 *        parse --peer-once DIR FILE
 *        parse --safetensors [-n N] FILE...
 *        parse --make-st OUT [N_TENSORS]
 *   -n N          iterations per side and file (default 50)
 *   --peer DIR    llama.cpp's library folder (default: what scripts/peer.sh installs)
 *   FILE...       GGUF files (default: the vocab fixtures and stories260K.gguf)
 *   --make-vocab  writes a vocabulary-only GGUF of N_TOKENS tokens (default 262144, as Gemma 3's:
 *                 tokens, scores, token types and a merge per token, about 16 MB of header),
 *                 deterministic
 *   --process     whole processes instead: `CLI info FILE` against a process that dlopens
 *                 llama.cpp, parses FILE once and exits (`parse --peer-once`), alternating, each
 *                 timed from spawn to exit
 *   --safetensors weightmap alone on safetensors files (no peer): open+close timed n times, with
 *                 the ledger's heap and scratch peaks of one open (the JSON parse's memory)
 *   --make-st     writes a safetensors file of N_TENSORS llama-named F16 tensors of 2x2 elements
 *                 and a __metadata__ of 64 entries (default 100000 tensors, about 9 MB of JSON),
 *                 deterministic
 */
#include "peer.h"

#include <weightmap.h>

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* llama-bpe first: it carries the 10x target. */
static const char *const default_files[] = {
    "gguf/ggml-vocab-llama-bpe.gguf", "gguf/ggml-vocab-aquila.gguf",
    "gguf/ggml-vocab-gpt-2.gguf",     "gguf/ggml-vocab-phi-3.gguf",
    "gguf/ggml-vocab-llama-spm.gguf", "gguf/ggml-vocab-bert-bge.gguf",
    "gguf/stories260K.gguf",
};
#define N_DEFAULT (sizeof default_files / sizeof default_files[0])
#define TARGET_RATIO 10.0
#define PROCESS_TARGET 12.0

/* ---- one timed open of each side ---- */

/* Returns the milliseconds one open+close took, or a negative value on failure. */
static double time_weightmap(const char *path, uint64_t *heap_peak) {
    wm_error err;
    wm_file *f = NULL;
    if (heap_peak) wm_ledger_reset_peaks();
    double t0 = bench_now_ms();
    wm_status st = wm_file_open(path, &f, &err);
    if (st == WM_OK && heap_peak) {
        wm_ledger l = WM_LEDGER_INIT;
        wm_ledger_get(&l);
        *heap_peak = l.cat[WM_LEDGER_HEAP].peak;
    }
    wm_file_close(f);
    double t1 = bench_now_ms();
    if (st != WM_OK) {
        fprintf(stderr, "parse: weightmap cannot open %s: %s\n", path, err.msg);
        return -1;
    }
    return t1 - t0;
}

static double time_peer(const bench_peer *p, const char *path) {
    struct bench_gguf_init_params ip = {.no_alloc = true, .ctx = NULL};
    double t0 = bench_now_ms();
    struct gguf_context *g = p->gguf_init_from_file(path, ip);
    if (g) p->gguf_free(g);
    double t1 = bench_now_ms();
    if (!g) {
        fprintf(stderr, "parse: llama.cpp cannot parse %s\n", path);
        return -1;
    }
    return t1 - t0;
}

/* ---- the per-file loop ---- */

typedef struct row {
    const char *name;
    uint64_t size, heap_peak;
    size_t n_kv, n_tensors;
    bench_stats wm, peer;
} row;

/* Checks that both sides read the same counts, warms both up, then times n alternations
 * (the order flips each iteration so neither side always runs first). */
static int bench_file(const bench_peer *p, const char *path, int n, row *out) {
    wm_error err;
    wm_file *f = NULL;
    if (wm_file_open(path, &f, &err) != WM_OK) {
        fprintf(stderr, "parse: weightmap cannot open %s: %s\n", path, err.msg);
        return -1;
    }
    out->size = wm_file_size(f);
    out->n_kv = wm_file_metadata_count(f);
    out->n_tensors = wm_file_tensor_count(f);
    wm_file_close(f);
    struct bench_gguf_init_params ip = {.no_alloc = true, .ctx = NULL};
    struct gguf_context *g = p->gguf_init_from_file(path, ip);
    if (!g) {
        fprintf(stderr, "parse: llama.cpp cannot parse %s\n", path);
        return -1;
    }
    int64_t pkv = p->gguf_get_n_kv(g), pnt = p->gguf_get_n_tensors(g);
    p->gguf_free(g);
    if (pkv != (int64_t)out->n_kv || pnt != (int64_t)out->n_tensors) {
        fprintf(stderr,
                "parse: %s: weightmap reads %zu KV and %zu tensors, llama.cpp %lld and %lld\n",
                path, out->n_kv, out->n_tensors, (long long)pkv, (long long)pnt);
        return -1;
    }
    if (time_weightmap(path, &out->heap_peak) < 0 || time_peer(p, path) < 0) return -1;

    double *tw = calloc((size_t)n, sizeof *tw), *tp = calloc((size_t)n, sizeof *tp);
    if (!tw || !tp) {
        free(tw);
        free(tp);
        fprintf(stderr, "parse: out of memory\n");
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (i % 2 == 0) {
            tw[i] = time_weightmap(path, NULL);
            tp[i] = time_peer(p, path);
        } else {
            tp[i] = time_peer(p, path);
            tw[i] = time_weightmap(path, NULL);
        }
        if (tw[i] < 0 || tp[i] < 0) rc = -1;
    }
    if (rc == 0) {
        out->wm = bench_stats_of(tw, (size_t)n);
        out->peer = bench_stats_of(tp, (size_t)n);
    }
    free(tw);
    free(tp);
    return rc;
}

/* ---- a big vocabulary ---- */

static void put(FILE *o, const void *p, size_t n) { fwrite(p, 1, n, o); }
static void put_u32(FILE *o, uint32_t v) { put(o, &v, 4); }
static void put_u64(FILE *o, uint64_t v) { put(o, &v, 8); }
static void put_str(FILE *o, const char *s) {
    put_u64(o, strlen(s));
    put(o, s, strlen(s));
}
static void put_key(FILE *o, const char *key, uint32_t type) {
    put_str(o, key);
    put_u32(o, type);
}

/* Token k: a word-like string of 3 to 14 bytes from a fixed xorshift sequence. */
static const char *token_text(uint32_t k, char buf[32]) {
    static const char alpha[] = "etaoinshrdlucmfwypvbgkqjxz_ETAOINSHRDLU0123456789";
    uint32_t x = k * 2654435761u + 12345u;
    int len = 3 + (int)(x % 12);
    int n = snprintf(buf, 32, "%u", k);
    for (int i = n; i < len + n && i < 30; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = alpha[x % (sizeof alpha - 1)];
    }
    buf[len + n < 30 ? len + n : 30] = 0;
    return buf;
}

static int make_vocab(const char *out, uint32_t n) {
    FILE *o = fopen(out, "wb");
    if (!o) {
        perror(out);
        return 1;
    }
    enum { U32 = 4, I32 = 5, F32 = 6, STRING = 8, ARRAY = 9 };
    put(o, "GGUF", 4);
    put_u32(o, 3);
    put_u64(o, 0); /* tensors */
    put_u64(o, 6); /* KV */
    put_key(o, "general.architecture", STRING);
    put_str(o, "gemma3");
    put_key(o, "tokenizer.ggml.model", STRING);
    put_str(o, "llama");
    put_key(o, "tokenizer.ggml.tokens", ARRAY);
    put_u32(o, STRING);
    put_u64(o, n);
    char buf[32], buf2[32], line[80];
    for (uint32_t k = 0; k < n; k++)
        put_str(o, token_text(k, buf));
    put_key(o, "tokenizer.ggml.scores", ARRAY);
    put_u32(o, F32);
    put_u64(o, n);
    for (uint32_t k = 0; k < n; k++) {
        float v = -(float)k;
        put(o, &v, 4);
    }
    put_key(o, "tokenizer.ggml.token_type", ARRAY);
    put_u32(o, I32);
    put_u64(o, n);
    for (uint32_t k = 0; k < n; k++)
        put_u32(o, k < 8 ? 3 : 1);
    put_key(o, "tokenizer.ggml.merges", ARRAY);
    put_u32(o, STRING);
    put_u64(o, n);
    for (uint64_t k = 0; k < n; k++) {
        snprintf(line, sizeof line, "%s %s", token_text((uint32_t)(k % n), buf),
                 token_text((uint32_t)((k * 7 + 1) % n), buf2));
        put_str(o, line);
    }
    if (fclose(o) != 0) {
        perror(out);
        return 1;
    }
    return 0;
}

/* ---- safetensors headers ---- */

static int make_st(const char *out, uint32_t n) {
    char *json = NULL;
    size_t len = 0;
    FILE *j = open_memstream(&json, &len);
    if (!j) return 1;
    fputs("{\"__metadata__\":{", j);
    for (int k = 0; k < 64; k++)
        fprintf(j, "%s\"key.%d\":\"value \\u00e9 %d\"", k ? "," : "", k, k * 7919);
    fputs("}", j);
    for (uint32_t i = 0; i < n; i++)
        fprintf(j,
                ",\"model.layers.%u.mlp.w%u.weight\":{\"dtype\":\"F16\",\"shape\":[2,2],"
                "\"data_offsets\":[%llu,%llu]}",
                i / 8, i % 8, (unsigned long long)i * 8, (unsigned long long)i * 8 + 8);
    fputs("}", j);
    fclose(j);
    FILE *o = fopen(out, "wb");
    if (!o) {
        perror(out);
        free(json);
        return 1;
    }
    put_u64(o, (uint64_t)len);
    put(o, json, len);
    static const unsigned char zero[8];
    for (uint32_t i = 0; i < n; i++)
        put(o, zero, 8);
    free(json);
    if (fclose(o) != 0) {
        perror(out);
        return 1;
    }
    return 0;
}

static int st_bench(int n, const char **files, size_t n_files) {
    char machine[512];
    bench_machine_line(machine, sizeof machine);
    printf("## parse: safetensors\n\nopen+close, %d iterations per file, warm page cache, one "
           "thread. weightmap %s.\nMachine: %s.\n\n",
           n, wm_version(), machine);
    printf("| file | header bytes | tensors | ms: median (p10-p90) | heap peak | scratch peak |\n"
           "|---|---:|---:|---:|---:|---:|\n");
    double *t = calloc((size_t)n, sizeof *t);
    if (!t) return 1;
    int rc = 0;
    for (size_t i = 0; i < n_files && rc == 0; i++) {
        wm_error err;
        wm_file *f = NULL;
        wm_ledger_reset_peaks();
        if (wm_file_open(files[i], &f, &err) != WM_OK) {
            fprintf(stderr, "parse: weightmap cannot open %s: %s\n", files[i], err.msg);
            rc = 1;
            break;
        }
        wm_ledger l;
        wm_ledger_get(&l);
        uint64_t hlen = wm_file_data_offset(f) - 8;
        size_t nt = wm_file_tensor_count(f);
        wm_file_close(f);
        for (int k = 0; k < n && rc == 0; k++)
            if ((t[k] = time_weightmap(files[i], NULL)) < 0) rc = 1;
        if (rc) break;
        bench_stats s = bench_stats_of(t, (size_t)n);
        const char *slash = strrchr(files[i], '/');
        printf("| %s | %llu | %zu | %.3f (%.3f-%.3f) | %.1f KiB | %.1f KiB |\n",
               slash ? slash + 1 : files[i], (unsigned long long)hlen, nt, s.median, s.p10, s.p90,
               (double)l.cat[WM_LEDGER_HEAP].peak / 1024.0,
               (double)l.cat[WM_LEDGER_SCRATCH].peak / 1024.0);
    }
    free(t);
    return rc;
}

/* ---- whole processes ---- */

extern char **environ;

/* Milliseconds from spawning argv to its exit (status 0 required), or a negative value. */
static double time_process(char *const argv[]) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    double t0 = bench_now_ms();
    pid_t pid;
    int e = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e) return -1;
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    double t1 = bench_now_ms();
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? t1 - t0 : -1;
}

static int peer_once(const char *dir, const char *path) {
    bench_peer peer = {0};
    if (bench_peer_open_gguf(&peer, dir)) return 1;
    struct bench_gguf_init_params ip = {.no_alloc = true, .ctx = NULL};
    struct gguf_context *g = peer.gguf_init_from_file(path, ip);
    if (!g) return 1;
    peer.gguf_free(g);
    bench_peer_close(&peer);
    return 0;
}

static int process_bench(const char *self, const char *cli, const char *peer_dir, const char *path,
                         int n) {
    char dir[4096];
    if (!peer_dir) {
        bench_peer probe = {0};
        if (bench_peer_open_gguf(&probe, NULL)) return 1;
        snprintf(dir, sizeof dir, "%s", probe.dir);
        bench_peer_close(&probe);
        peer_dir = dir;
    }
    char *wm_argv[] = {(char *)cli, "info", (char *)path, NULL};
    char *peer_argv[] = {(char *)self, "--peer-once", (char *)peer_dir, (char *)path, NULL};
    if (time_process(wm_argv) < 0 || time_process(peer_argv) < 0) {
        fprintf(stderr, "parse: %s or the peer failed on %s\n", cli, path);
        return 1;
    }
    double *tw = calloc((size_t)n, sizeof *tw), *tp = calloc((size_t)n, sizeof *tp);
    if (!tw || !tp) return 1;
    for (int i = 0; i < n; i++) {
        if (i % 2 == 0) {
            tw[i] = time_process(wm_argv);
            tp[i] = time_process(peer_argv);
        } else {
            tp[i] = time_process(peer_argv);
            tw[i] = time_process(wm_argv);
        }
        if (tw[i] < 0 || tp[i] < 0) return 1;
    }
    bench_stats w = bench_stats_of(tw, (size_t)n), p = bench_stats_of(tp, (size_t)n);
    char machine[512];
    bench_machine_line(machine, sizeof machine);
    const char *slash = strrchr(path, '/');
    printf("## parse, whole processes\n\n");
    printf("`weightmap info FILE` against a process that dlopens llama.cpp's libggml-base, runs "
           "gguf_init_from_file(no_alloc) + gguf_free once and exits; %d alternating runs each, "
           "spawn to exit, warm page cache. Machine: %s.\n\n",
           n, machine);
    printf("| file | weightmap ms: median (p10-p90) | llama.cpp ms: median (p10-p90) | llama.cpp / "
           "weightmap |\n|---|---:|---:|---:|\n");
    double ratio = w.median > 0 ? p.median / w.median : 0;
    printf("| %s | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.1fx |\n", slash ? slash + 1 : path,
           w.median, w.p10, w.p90, p.median, p.p10, p.p90, ratio);
    printf("\nTarget (whole process at least %.0fx faster): %s (%.1fx).\n", PROCESS_TARGET,
           ratio >= PROCESS_TARGET ? "met" : "NOT met", ratio);
    free(tw);
    free(tp);
    return 0;
}

/* ---- main ---- */

static void usage(void) {
    fprintf(stderr, "usage: parse [-n N] [--peer DIR] [FILE...]\n"
                    "       parse --make-vocab OUT [N_TOKENS]\n"
                    "       parse --process CLI [-n N] [--peer DIR] FILE\n"
                    "       parse --safetensors [-n N] FILE...\n"
                    "       parse --make-st OUT [N_TENSORS]\n");
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "--make-vocab") == 0)
        return make_vocab(argv[2], argc >= 4 ? (uint32_t)strtoul(argv[3], NULL, 10) : 262144u);
    if (argc == 4 && strcmp(argv[1], "--peer-once") == 0) return peer_once(argv[2], argv[3]);
    if (argc >= 3 && strcmp(argv[1], "--make-st") == 0)
        return make_st(argv[2], argc >= 4 ? (uint32_t)strtoul(argv[3], NULL, 10) : 100000u);
    int n = 50, st_only = 0;
    const char *peer_dir = NULL, *cli = NULL;
    const char **files = calloc((size_t)argc + N_DEFAULT, sizeof *files);
    char(*fixture)[4096] = calloc(N_DEFAULT, sizeof *fixture);
    size_t n_files = 0;
    if (!files || !fixture) return 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            n = atoi(argv[++i]);
            if (n < 1) {
                usage();
                return 2;
            }
        } else if (strcmp(argv[i], "--peer") == 0 && i + 1 < argc) {
            peer_dir = argv[++i];
        } else if (strcmp(argv[i], "--safetensors") == 0) {
            st_only = 1;
        } else if (strcmp(argv[i], "--process") == 0 && i + 1 < argc) {
            cli = argv[++i];
        } else if (argv[i][0] == '-') {
            usage();
            return 2;
        } else {
            files[n_files++] = argv[i];
        }
    }
    if (cli) {
        if (n_files != 1) {
            usage();
            return 2;
        }
        return process_bench(argv[0], cli, peer_dir, files[0], n);
    }
    if (st_only) {
        int rc = n_files ? st_bench(n, files, n_files) : 2;
        if (!n_files) usage();
        free(files);
        free(fixture);
        return rc;
    }
    if (n_files == 0)
        for (size_t i = 0; i < N_DEFAULT; i++)
            files[n_files++] = bench_fixture(fixture[i], sizeof fixture[i], default_files[i]);

    bench_peer peer = {0};
    if (bench_peer_open_gguf(&peer, peer_dir)) return 1;

    char machine[512];
    bench_machine_line(machine, sizeof machine);
    printf("## parse\n\n");
    printf(
        "open+close, %d alternating iterations per side and file, warm page cache, one thread.\n",
        n);
    printf(
        "weightmap %s; llama.cpp gguf_init_from_file(no_alloc=true, ctx=NULL) + gguf_free, ggml %s "
        "(commit %s).\n",
        wm_version(), peer.ggml_version(), peer.ggml_commit());
    printf("Machine: %s.\n\n", machine);
    printf("| file | bytes | KV | tensors | weightmap ms: median (p10-p90) | llama.cpp ms: median "
           "(p10-p90) | llama.cpp / weightmap | weightmap heap peak |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    fflush(stdout);

    int rc = 0;
    double first_ratio = 0;
    for (size_t i = 0; i < n_files; i++) {
        row r = {0};
        const char *slash = strrchr(files[i], '/');
        r.name = slash ? slash + 1 : files[i];
        if (bench_file(&peer, files[i], n, &r)) {
            printf("| %s | failed (see stderr) | | | | | | |\n", r.name);
            rc = 1;
            continue;
        }
        double ratio = r.wm.median > 0 ? r.peer.median / r.wm.median : 0;
        if (i == 0) first_ratio = ratio;
        printf(
            "| %s | %llu | %zu | %zu | %.3f (%.3f-%.3f) | %.3f (%.3f-%.3f) | %.1fx | %.1f KiB |\n",
            r.name, (unsigned long long)r.size, r.n_kv, r.n_tensors, r.wm.median, r.wm.p10,
            r.wm.p90, r.peer.median, r.peer.p10, r.peer.p90, ratio, (double)r.heap_peak / 1024.0);
        fflush(stdout);
    }
    if (n_files > 0 && rc == 0 && strstr(files[0], "ggml-vocab-llama-bpe.gguf"))
        printf("\nTarget (weightmap at least %.0fx faster on ggml-vocab-llama-bpe.gguf): %s "
               "(%.1fx).\n",
               TARGET_RATIO, first_ratio >= TARGET_RATIO ? "met" : "NOT met", first_ratio);
    bench_peer_close(&peer);
    free(files);
    free(fixture);
    return rc;
}
