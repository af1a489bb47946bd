/*
 * common.c: the helpers every subcommand uses (time, sizes, pages, devices) and the footprint
 * sampler.
 */
#include "gpu.h"

#ifdef WM_HAVE_CUDA
double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

bool parse_size(const char *s, uint64_t *out) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return false;
    switch (*end) {
    case 'G': v <<= 30; break;
    case 'M': v <<= 20; break;
    case 'K': v <<= 10; break;
    case 0: break;
    default: return false;
    }
    *out = v;
    return true;
}

void *pages(size_t len) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("gpu: mmap");
        exit(1);
    }
    madvise(p, len, MADV_HUGEPAGE);
    memset(p, 1, len);
    return p;
}

/* "0,1,2" into devs (at most 16); the count, or 0 when malformed. */
unsigned parse_devices(const char *s, int *devs) {
    unsigned n = 0;
    for (const char *p = s; *p && n < 16;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 15) return 0;
        devs[n++] = (int)v;
        if (*end && *end != ',') return 0;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* wm_backend_init on every device of a load. */
bool init_devices(const wm_load_options *o) {
    wm_error err;
    unsigned n = o->n_devices > 1 ? o->n_devices : 1;
    for (unsigned k = 0; k < n; k++)
        if (wm_backend_init(WM_BACKEND_CUDA, n > 1 ? o->devices[k] : o->device, &err) != WM_OK) {
            fprintf(stderr, "gpu: %s\n", err.msg);
            return false;
        }
    return true;
}

/* ---- footprint sampler ---- */

/* RssAnon + RssShmem + VmSwap from /proc/self/status: the footprint weightmap reports
 * (Anonymous + Swap + RssShmem), from counters the kernel keeps, so that sampling costs the
 * load nothing (smaps_rollup would walk every page of a mapped model each time). */
uint64_t footprint(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    uint64_t sum = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "RssAnon: %llu", &kb) == 1 || sscanf(line, "RssShmem: %llu", &kb) == 1 ||
            sscanf(line, "VmSwap: %llu", &kb) == 1)
            sum += (uint64_t)kb * 1024;
    }
    fclose(f);
    return sum;
}

static void *sample(void *arg) {
    sampler *s = arg;
    struct timespec d = {0, 2000000};
    while (!atomic_load(&s->stop)) {
        uint64_t f = footprint();
        if (f > s->peak) s->peak = f;
        s->samples++;
        nanosleep(&d, NULL);
    }
    return NULL;
}

void sampler_start(sampler *s) {
    s->peak = footprint();
    s->samples = 0;
    atomic_store(&s->stop, 0);
    pthread_create(&s->th, NULL, sample, s);
}

void sampler_stop(sampler *s) {
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    uint64_t f = footprint();
    if (f > s->peak) s->peak = f;
}
#endif /* WM_HAVE_CUDA */
