/*
 * probe.c: `weightmap probe [--pid P] [--file F] [--json]`: a process's memory figures and
 * every region of its weight files (or of F), from the library's wm_mem_* calls.
 *
 * Sections: argument parsing; reading the regions (the list can grow between two calls, so it
 * is read until it fits); JSON output; the human table.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct probe_args {
    int pid; /* 0 = this process */
    const char *file;
    bool json;
} probe_args;

static int parse_args(int argc, char **argv, probe_args *a) {
    memset(a, 0, sizeof *a);
    cli_args p;
    cli_args_init(&p, "probe", argc, argv);
    for (int k; (k = cli_next(&p)) != CLI_END;) {
        uint64_t v;
        if (k == CLI_ERROR) return 2;
        if (k == CLI_ARG) return cli_usage("probe: unexpected argument '%s'", p.value);
        if (cli_is(&p, "json")) {
            a->json = true;
        } else if (cli_is(&p, "pid")) {
            if (cli_value_u64(&p, &v)) return 2;
            a->pid = (int)v;
        } else if (cli_is(&p, "file")) {
            if (!*p.value) return cli_bad_value(&p, "a path");
            a->file = p.value;
        }
    }
    return 0;
}

/* Reads the regions into a malloc'd array (*out, *n); grows it when regions appear meanwhile. */
static wm_status read_regions(const probe_args *a, wm_file_region **out, size_t *n, wm_error *err) {
    size_t cap = 32;
    wm_file_region *r = NULL;
    for (;;) {
        wm_file_region *g = realloc(r, cap * sizeof *r);
        if (!g) {
            free(r);
            snprintf(err->msg, sizeof err->msg, "probe: out of memory");
            return WM_ENOMEM;
        }
        r = g;
        size_t count = 0;
        wm_status st = wm_mem_file_regions(a->pid, a->file, r, cap, &count, err);
        if (st != WM_OK) {
            free(r);
            return st;
        }
        if (count <= cap) {
            *out = r;
            *n = count;
            return WM_OK;
        }
        cap = count + 16;
    }
}

static void print_json(int pid, const wm_mem_figures *f, const wm_file_region *r, size_t n) {
    printf("{\"pid\": %d, \"footprint\": %" PRIu64 ", \"resident\": %" PRIu64
           ", \"file_resident\": %" PRIu64 ", \"locked\": %" PRIu64 ", \"committed\": %" PRIu64
           ", \"file_regions\": [",
           pid, f->footprint, f->resident, f->file_resident, f->locked, f->committed);
    for (size_t i = 0; i < n; i++) {
        printf("%s\n  {\"path\": ", i ? "," : "");
        cli_json_cstr(stdout, r[i].path);
        printf(", \"start\": %" PRIu64 ", \"end\": %" PRIu64 ", \"offset\": %" PRIu64
               ", \"perms\": ",
               r[i].start, r[i].end, r[i].offset);
        cli_json_cstr(stdout, r[i].perms);
        printf(", \"size\": %" PRIu64 ", \"rss\": %" PRIu64 ", \"privatised\": %" PRIu64
               ", \"private_dirty\": %" PRIu64 ", \"locked\": %" PRIu64 "}",
               r[i].size, r[i].rss, r[i].privatised, r[i].private_dirty, r[i].locked);
    }
    printf("%s]}\n", n ? "\n" : "");
}

static void print_table(int pid, const probe_args *a, const wm_mem_figures *f,
                        const wm_file_region *r, size_t n) {
    char b[32];
    printf("process %d\n", pid);
    printf("  %-14s %12s   %s\n", "footprint", cli_bytes(f->footprint, b),
           "private memory: anonymous + swap + shared memory");
    printf("  %-14s %12s   %s\n", "resident", cli_bytes(f->resident, b), "in RAM, all kinds");
    printf("  %-14s %12s   %s\n", "file resident", cli_bytes(f->file_resident, b),
           "in RAM and backed by files (page cache)");
    printf("  %-14s %12s   %s\n", "locked", cli_bytes(f->locked, b), "under mlock");
    printf("  %-14s %12s   %s\n", "committed", cli_bytes(f->committed, b),
           "commit charge of private writable memory");
    printf("\n%zu region%s of %s\n", n, n == 1 ? "" : "s", a->file ? a->file : "weight files");
    if (!n) return;
    printf("  %-14s %-14s %10s %-5s %10s %10s %10s %10s %10s  %s\n", "start", "end", "offset",
           "perms", "size", "rss", "privatised", "dirty", "locked", "path");
    uint64_t tot[5] = {0};
    for (size_t i = 0; i < n; i++) {
        char c[5][32];
        printf("  %-14" PRIx64 " %-14" PRIx64 " %10" PRIx64 " %-5s %10s %10s %10s %10s %10s  %s\n",
               r[i].start, r[i].end, r[i].offset, r[i].perms, cli_bytes(r[i].size, c[0]),
               cli_bytes(r[i].rss, c[1]), cli_bytes(r[i].privatised, c[2]),
               cli_bytes(r[i].private_dirty, c[3]), cli_bytes(r[i].locked, c[4]), r[i].path);
        tot[0] += r[i].size;
        tot[1] += r[i].rss;
        tot[2] += r[i].privatised;
        tot[3] += r[i].private_dirty;
        tot[4] += r[i].locked;
    }
    if (n > 1) {
        char c[5][32];
        printf("  %-14s %-14s %10s %-5s %10s %10s %10s %10s %10s\n", "total", "", "", "",
               cli_bytes(tot[0], c[0]), cli_bytes(tot[1], c[1]), cli_bytes(tot[2], c[2]),
               cli_bytes(tot[3], c[3]), cli_bytes(tot[4], c[4]));
    }
    /* what the columns mean (smaps' fields); dirty most of all, which a shared mapping of a
     * file just written shows in full without costing this process anything of its own */
    puts("  rss: the region's pages in RAM; privatised: pages copied into this process's own\n"
         "  memory (written through a private mapping); dirty: pages changed and not yet written\n"
         "  to the file (smaps' Private_Dirty): in a shared mapping (perms s) that is the file's\n"
         "  page cache, e.g. a file just written, not memory of this process; locked: mlocked");
}

int cmd_probe(int argc, char **argv) {
    probe_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    wm_error err = {0};
    wm_mem_figures f;
    if (wm_mem_figures_get(a.pid, &f, &err) != WM_OK) return cli_fail(&err);
    wm_file_region *r = NULL;
    size_t n = 0;
    if (read_regions(&a, &r, &n, &err) != WM_OK) return cli_fail(&err);
    int pid = a.pid ? a.pid : (int)getpid();
    if (a.json)
        print_json(pid, &f, r, n);
    else
        print_table(pid, &a, &f, r, n);
    free(r);
    return 0;
}
