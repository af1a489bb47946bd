/*
 * demo.c: `weightmap demo [--model PATH] [--size BYTES] [--cycles N] [--json]`: check on a model
 * made on first use. The default model lives in a cache folder made when missing:
 * $XDG_CACHE_HOME/weightmap, else $HOME/.cache/weightmap, else (no HOME, or an empty one)
 * $TMPDIR/weightmap-cache-UID (TMPDIR defaults to /tmp).
 */
#include "cli.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Makes the folder `path` and every missing parent (as mkdir -p); 0, or 1 after one line
 * naming the folder that could not be made. */
static int make_dirs(char *path) {
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        int e = mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : errno;
        struct stat st;
        if (!e && (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))) e = ENOTDIR;
        if (e) {
            fprintf(stderr, "weightmap: demo: cannot make the cache folder %s: %s\n", path,
                    strerror(e));
            *p = c;
            return 1;
        }
        *p = c;
        if (!c) return 0;
    }
}

/* The cache folder (made when missing) and in it the default model's path for `size`. */
static int default_model(char *out, size_t cap, uint64_t size) {
    const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    const char *tmp = getenv("TMPDIR");
    if (cache && *cache)
        snprintf(out, cap, "%s/weightmap", cache);
    else if (home && *home)
        snprintf(out, cap, "%s/.cache/weightmap", home);
    else
        snprintf(out, cap, "%s/weightmap-cache-%u", tmp && *tmp ? tmp : "/tmp", (unsigned)getuid());
    if (make_dirs(out)) return 1;
    size_t n = strlen(out);
    if (size % (1 << 20) == 0)
        snprintf(out + n, cap - n, "/default-%" PRIu64 "M.gguf", size >> 20);
    else
        snprintf(out + n, cap - n, "/default-%" PRIu64 ".gguf", size);
    return 0;
}

int cmd_demo(int argc, char **argv) {
    const char *model = NULL;
    uint64_t cycles = 3, size = (uint64_t)512 << 20;
    bool json = false;
    cli_args p;
    cli_args_init(&p, "demo", argc, argv);
    for (int k; (k = cli_next(&p)) != CLI_END;) {
        if (k == CLI_ERROR) return 2;
        if (k == CLI_ARG) return cli_usage("demo: no FILE: --model PATH names the model");
        if (cli_is(&p, "model"))
            model = p.value;
        else if (cli_is(&p, "json"))
            json = true;
        else if ((cli_is(&p, "cycles") && cli_value_u64(&p, &cycles)) ||
                 (cli_is(&p, "size") && cli_value_u64(&p, &size)))
            return 2;
    }
    char def[PATH_MAX];
    if (!model) {
        if (default_model(def, sizeof def, size)) return 1;
        model = def;
    }
    struct stat st;
    if (stat(model, &st) != 0) {
        char b[32];
        /* on stderr, so that --json output stays one line of JSON */
        fprintf(stderr, "weightmap: demo: %s does not exist: making a %s model there\n", model,
                cli_bytes(size, b));
        int rc = cli_make_default_model(model, size);
        if (rc) return rc;
    }
    return cli_check_file(model, false, (unsigned)cycles, json, 0, NULL);
}
