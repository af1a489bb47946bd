/*
 * trace.c: what `weightmap trace` costs the program it traces. llama.cpp's own loader (the npm
 * peer, through tests/trace/llama_driver) loads and frees a model CYCLES times, untraced and under
 * `weightmap trace --cycles-marker llama_model_free`, alternating, ROUNDS times each, in one run;
 * the ratio of the medians is the overhead. The figure: one llama_model_load_from_file, timed by
 * the driver's own clock (LLAMA_DRIVER_CYCLES), median (p10-p90) over all ROUNDS x CYCLES loads
 * of each side; also the ratios of the per-run medians of the time inside the loads and of the
 * whole process's wall time (fork to exit, the tracer's report included).
 *
 *     bench/trace [-r ROUNDS] [-c CYCLES] [MODEL...]
 *
 * Without MODEL: stories260K (fixtures) and a 64 MiB make-model file (made in the build folder
 * when missing). Each model in llama.cpp's read mode (0) and mmap mode (1). Exits 77 (skipped)
 * when the peer or the driver is missing. bench/RESULTS.md has a run and its command.
 */
#include "peer.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char build_dir[PATH_MAX - 64];

/* Runs argv with stdout to /dev/null and stderr to a pipe; returns the wall seconds, the driver's
 * "S s in llama_model_load_from_file" in *load_s, and appends its per-cycle load seconds to
 * cyc[*n_cyc...] (cap entries at most); -1 on failure. */
static double run(char **argv, double *load_s, double *cyc, int *n_cyc, int cap) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    double t0 = bench_now_ms();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(fds[1], 2);
        close(fds[0]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    char buf[8192];
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    close(fds[0]);
    buf[n] = 0;
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    double wall = (bench_now_ms() - t0) / 1e3;
    const char *at = strstr(buf, "llama_driver: ");
    const char *sec = at ? strstr(at, " s in llama_model_load_from_file") : NULL;
    if (!sec) {
        fprintf(stderr, "bench/trace: %s gave no load time (exit %d):\n%s\n", argv[0],
                WEXITSTATUS(status), buf);
        return -1;
    }
    while (sec > at && sec[-1] != ' ')
        sec--;
    *load_s = strtod(sec, NULL);
    for (const char *c = strstr(buf, "llama_driver: cycle "); c;
         c = strstr(c + 1, "llama_driver: cycle ")) {
        const char *v = strchr(c + 20, ' ');
        if (v && *n_cyc < cap) cyc[(*n_cyc)++] = strtod(v + 1, NULL);
    }
    return wall;
}

static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && v[k] < v[k - 1]; k--) {
            double t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    int rounds = 5, cycles = 5, opt;
    while ((opt = getopt(argc, argv, "r:c:")) != -1) {
        if (opt == 'r')
            rounds = atoi(optarg);
        else if (opt == 'c')
            cycles = atoi(optarg);
        else {
            fprintf(stderr, "usage: bench/trace [-r ROUNDS] [-c CYCLES] [MODEL...]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 100 || cycles < 1) return 2;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return 1;
    exe[len] = 0;
    snprintf(build_dir, sizeof build_dir, "%s",
             dirname(dirname(exe))); /* build/bench/trace -> build */
    char cli[PATH_MAX + 32], driver[PATH_MAX + 32];
    snprintf(cli, sizeof cli, "%s/weightmap", build_dir);
    snprintf(driver, sizeof driver, "%s/tests/trace/llama_driver", build_dir);
    const char *peer = bench_peer_default_dir();
    char peer_lib[4200];
    snprintf(peer_lib, sizeof peer_lib, "%s/libllama.v0.4.0.so", peer);
    if (access(peer_lib, R_OK) != 0 || access(driver, X_OK) != 0 || access(cli, X_OK) != 0) {
        printf("bench/trace: skipped (needs the peer, scripts/peer.sh, and %s, built with the "
               "tests)\n",
               driver);
        return 77;
    }
    char models[8][PATH_MAX];
    int n_models = 0;
    for (int i = optind; i < argc && n_models < 8; i++)
        snprintf(models[n_models++], PATH_MAX, "%s", argv[i]);
    if (!n_models) {
        bench_fixture(models[n_models++], PATH_MAX, "gguf/stories260K.gguf");
        snprintf(models[n_models], PATH_MAX, "%s/bench/trace-64M.gguf", build_dir);
        if (access(models[n_models], R_OK) != 0) {
            char *mk[] = {cli, "make-model", models[n_models], "--size", "64M", NULL};
            pid_t pid = fork();
            if (pid == 0) {
                execv(cli, mk);
                _exit(127);
            }
            int st;
            waitpid(pid, &st, 0);
            if (!WIFEXITED(st) || WEXITSTATUS(st)) return 1;
        }
        n_models++;
    }
    char line[512];
    bench_machine_line(line, sizeof line);
    printf("# bench/trace: %d rounds, alternating, %d load/free cycles per run; %s\n", rounds,
           cycles, line);
    printf("| model | llama.cpp mode | one load, untraced ms: median (p10-p90) | traced ms | ratio "
           "| in load per run, ratio | process wall per run, ratio |\n"
           "|---|---|---:|---:|---:|---:|---:|\n");
    setenv("LLAMA_DRIVER_CYCLES", "1", 1);
    for (int m = 0; m < n_models; m++)
        for (int mode = 0; mode < 2; mode++) {
            char mode_s[4], cyc_s[16];
            snprintf(mode_s, sizeof mode_s, "%d", mode);
            snprintf(cyc_s, sizeof cyc_s, "%d", cycles);
            char *plain[] = {driver, (char *)peer, mode_s, cyc_s, models[m], NULL};
            char *traced[] = {cli,
                              "trace",
                              "--cycles-marker",
                              "llama_model_free",
                              "--out",
                              "/dev/null",
                              "--",
                              driver,
                              (char *)peer,
                              mode_s,
                              cyc_s,
                              models[m],
                              NULL};
            double lp[100], lt[100], wp[100], wt[100];
            static double cp[100 * 64], ct[100 * 64];
            int ncp = 0, nct = 0, cap = (int)(sizeof cp / sizeof cp[0]);
            for (int r = 0; r < rounds; r++) {
                wp[r] = run(plain, &lp[r], cp, &ncp, cap);
                wt[r] = run(traced, &lt[r], ct, &nct, cap);
                if (wp[r] < 0 || wt[r] < 0) return 1;
            }
            if (!ncp || !nct) return 1;
            bench_stats sp = bench_stats_of(cp, (size_t)ncp), st = bench_stats_of(ct, (size_t)nct);
            double a = median(lp, rounds), b = median(lt, rounds), c = median(wp, rounds),
                   d = median(wt, rounds);
            const char *name = strrchr(models[m], '/');
            printf("| %s | %s | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.3f | %.3f | %.3f |\n",
                   name ? name + 1 : models[m], mode ? "mmap (1)" : "read (0)", sp.median * 1e3,
                   sp.p10 * 1e3, sp.p90 * 1e3, st.median * 1e3, st.p10 * 1e3, st.p90 * 1e3,
                   st.median / sp.median, b / a, d / c);
            fflush(stdout);
        }
    return 0;
}
