/*
 * crew.c: the reading engine's threads (engine.h): how many a run uses, a crew of them that
 * lives for one run, and each reading thread's own descriptors of the shards.
 */
#include "engine.h"

/* ---- how many ---- */

unsigned wm__read_threads(unsigned asked) {
    unsigned n = asked ? asked : wm__os_cpu_count();
    return n > WM__MAX_THREADS ? WM__MAX_THREADS : n;
}

/* ---- a crew ---- */

static void *crew_main(void *arg) {
    const wm__crew *crew = arg;
    wm__os_task_scope(crew->fn, crew->arg);
    return NULL;
}

wm_status wm__crew_start(const char *path, wm__crew *crew, unsigned n, wm_error *err) {
    for (unsigned t = 0; t < n; t++) {
        wm_os_thread *th = &crew->th[crew->started];
        int e = wm__os_thread_start(th, crew_main, crew);
        if (e)
            return wm__err(err, WM_ENOMEM, e, "%s: cannot start worker thread %u: %s", path, t + 1,
                           wm__errno_text(e));
        wm__ledger_acquire(WM_LEDGER_SCRATCH, th->stack_len);
        crew->started++;
    }
    return WM_OK;
}

void wm__crew_join(wm__crew *crew) {
    for (unsigned t = 0; t < crew->started; t++) {
        size_t len = crew->th[t].stack_len;
        wm__os_thread_join(&crew->th[t]);
        wm__ledger_release(WM_LEDGER_SCRATCH, len);
    }
    crew->started = 0;
}

/* ---- descriptors of a reading thread ---- */

void wm__fds_open(const wm_file *f, wm__fds *out) {
    *out = (wm__fds){0};
    int *fd = wm__alloc(f->n_shards * sizeof *fd);
    if (!fd) return;
    for (uint32_t i = 0; i < f->n_shards; i++)
        if (wm__os_reopen(f->shards[i].fd, &fd[i]) != 0) fd[i] = -1;
    *out = (wm__fds){.fd = fd, .n = f->n_shards};
}

int wm__fds_get(const wm__fds *fds, const wm_file *f, uint32_t shard) {
    return fds && fds->fd && fds->fd[shard] >= 0 ? fds->fd[shard] : f->shards[shard].fd;
}

void wm__fds_close(wm__fds *fds) {
    for (uint32_t i = 0; fds->fd && i < fds->n; i++)
        wm__os_close(fds->fd[i]);
    wm__free(fds->fd);
    *fds = (wm__fds){0};
}
