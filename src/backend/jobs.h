/*
 * jobs.h: a model's load as work for the reading engine (src/read/engine.h), for the backends:
 * the run of a load, the jobs of a packed chunk, progress, and whether readers need descriptors
 * of their own. The engine knows nothing of models; this is where a model meets it.
 */
#ifndef WM_JOBS_H
#define WM_JOBS_H

#include "../read/engine.h"
#include "backend.h"

/* Threads a load uses: opts.threads, or one per online CPU, at most WM__MAX_THREADS. */
unsigned wm__load_threads(const wm_model *m);
/* The engine's run for a load of m: its file, its reader (m->rd), its threads and progress. */
wm__read_run wm__model_run(wm_model *m);
/* Calls the load's progress callback; true means the caller asked to cancel. */
bool wm__progress(wm_model *m, uint64_t done, uint64_t total);
/* Whether the load reads rows (a tensor's place has rows > 1: last-dimension slices), so that
 * each reading thread reads through descriptors of its own (wm__fds). */
bool wm__fds_wanted(const wm_model *m);

/* wm__chunk_jobs flags. FRESH_PAGES: the destinations are fresh anonymous pages (CPU heap), so a
 * job in a chunk too small for huge pages prefaults its destination in one call first. */
#define WM__JOBS_FRESH_PAGES 1u
/* Builds the jobs that fill chunk `c` of a packed layout into host memory at base; the jobs are
 * appended to *jobs (a counted allocation of *cap entries, *n used, that the caller frees). */
wm_status wm__chunk_jobs(wm_model *m, uint32_t c, unsigned char *base, unsigned flags,
                         wm__job **jobs, size_t *n, size_t *cap, wm_error *err);

#endif /* WM_JOBS_H */
