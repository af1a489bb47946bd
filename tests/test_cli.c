/*
 * test_cli.c: the weightmap tool as a user runs it: exit codes, the one-line error, and the JSON
 * fields DESIGN.md fixes for info, load and check, on single files and sharded sets.
 */
#include "wmtest.h"

#include <string.h>
#include <sys/wait.h>

/* Runs a shell command line; returns its exit code and its stdout (malloc'd) in *out. */
static int run(const char *cmdline, char **out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s 2>%s", cmdline, wmt_tmp("stderr.txt"));
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t k;
    while ((k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *stderr_text(void) {
    size_t n;
    char *s = wmt_read_file(wmt_tmp("stderr.txt"), &n);
    s = realloc(s, n + 1);
    s[n] = 0;
    return s;
}

/* Under AddressSanitizer its allocator's quarantine and shadow memory keep hundreds of KiB of
 * footprint after a release, so the tool's footprint verdict fails there: sanitizer builds check
 * the exact figures (ledger, file regions) and not the verdict. */
static void verdict_exit(int rc, int line) {
    if (WMT_ASAN ? rc != 0 && rc != 1 : rc != 0) wmt_fail(__FILE__, line, "exit %d", rc);
}
#define VERDICT_EXIT(rc) verdict_exit((rc), __LINE__)
#define HAS_VERDICT(s, needle)                                                                     \
    do {                                                                                           \
        if (!WMT_ASAN) HAS(s, needle);                                                             \
    } while (0)

#define HAS(s, needle) CHECK_MSG(strstr((s), (needle)) != NULL, "output lacks %s:\n%.2000s", needle, s)

WM_TEST(exit_codes_and_error_line) {
    char *out, *err;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s load %s", WM_CLI, wmt_fixture("gguf/stories260K.gguf"));
    CHECK_EQ(run(cmd, &out), 2); /* no --mode: usage error, no default */
    err = stderr_text();
    HAS(err, "--mode is required");
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "%s info %s", WM_CLI, wmt_fixture("malformed/q8_0-row-172.gguf"));
    CHECK_EQ(run(cmd, &out), 1);
    err = stderr_text();
    CHECK(strncmp(err, "weightmap: ", 11) == 0);
    HAS(err, "q8_0-row-172.gguf: at offset");
    CHECK(strchr(err, '\n') == err + strlen(err) - 1); /* one line */
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "%s frobnicate", WM_CLI);
    CHECK_EQ(run(cmd, &out), 2);
    free(out);
}

WM_TEST(info_json_fields) {
    char *out;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s info --json %s", WM_CLI, wmt_fixture("gguf/stories260K.gguf"));
    CHECK_EQ(run(cmd, &out), 0);
    HAS(out, "\"format\": \"gguf\"");
    HAS(out, "\"version\": 3");
    HAS(out, "\"n_tensors\": 48");
    HAS(out, "\"n_metadata\": 19");
    HAS(out, "\"data_offset\": 14176");
    HAS(out, "{\"name\": \"token_embd.weight\", \"type\": \"f32\", \"shape\": [64, 512], \"offset\": 14176, \"nbytes\": 131072");
    free(out);
}

WM_TEST(check_json_every_mode_returns_everything) {
    char *out;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s check --json --cycles 2 %s", WM_CLI, wmt_fixture("gguf/stories260K.gguf"));
    VERDICT_EXIT(run(cmd, &out));
    HAS_VERDICT(out, "\"ok\": true, \"modes\": [");
    HAS(out, "{\"mode\": \"heap\", \"cycles\": 2, \"load_seconds\": ");
    HAS(out, "{\"mode\": \"mmap\", \"cycles\": 2");
    HAS(out, "{\"mode\": \"mmap-private\", \"cycles\": 2");
    HAS(out, "\"privatised\": 0, \"locked\": 0, \"file_regions\": 1}");
    HAS(out, "\"ledger_bytes\": 0, \"ledger_regions\": 0, \"file_regions\": 0}");
    free(out);
}

WM_TEST(check_sharded_set_counts_every_shard) {
    char *out;
    char cmd[1024];
    const char *base = wmt_tmp("set.safetensors");
    snprintf(cmd, sizeof cmd, "%s make-model %s --size 4M --shards 3 >/dev/null", WM_CLI, base);
    CHECK_EQ(run(cmd, &out), 0);
    free(out);
    snprintf(cmd, sizeof cmd, "%s check --json --cycles 1 %s.index.json", WM_CLI, base);
    VERDICT_EXIT(run(cmd, &out));
    /* mapped modes map each of the three shards */
    HAS(out, "\"file_regions\": 3}");
    HAS(out, "\"ledger_bytes\": 0, \"ledger_regions\": 0, \"file_regions\": 0}");
    free(out);
}

WM_TEST(load_json_and_lock_refusal) {
    char *out;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s load --json --mode heap --cycles 3 --threads 2 %s", WM_CLI,
             wmt_fixture("gguf/stories260K.gguf"));
    VERDICT_EXIT(run(cmd, &out));
    HAS(out, "\"mode\": \"heap\"");
    HAS_VERDICT(out, "\"ok\": true");
    HAS(out, "\"ledger_bytes\": 0, \"ledger_regions\": 0, \"file_regions\": 0}");
    HAS(out, "{\"cycle\": 3, ");
    free(out);
    snprintf(cmd, sizeof cmd, "%s load --mode mmap-private --lock %s", WM_CLI,
             wmt_fixture("gguf/stories260K.gguf"));
    CHECK_EQ(run(cmd, &out), 1);
    char *err = stderr_text();
    HAS(err, "privatise");
    free(err);
    free(out);
}

WM_TEST(make_model_is_deterministic) {
    char *out;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s make-model %s --size 3M --seed 7 && %s make-model %s --size 3M --seed 7 && cmp %s %s",
             WM_CLI, wmt_tmp("a.gguf"), WM_CLI, wmt_tmp("b.gguf"), wmt_tmp("a.gguf"), wmt_tmp("b.gguf"));
    CHECK_EQ(run(cmd, &out), 0);
    free(out);
    snprintf(cmd, sizeof cmd, "%s make-model %s --size 3M --seed 8 && cmp -s %s %s", WM_CLI,
             wmt_tmp("c.gguf"), wmt_tmp("a.gguf"), wmt_tmp("c.gguf"));
    CHECK_EQ(run(cmd, &out), 1); /* another seed, other bytes */
    free(out);
}
