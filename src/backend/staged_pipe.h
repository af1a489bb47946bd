/*
 * staged_pipe.h: the staged pipeline's own types, shared by its two files and nothing else:
 * staged_load.c plans the windows, sizes the ring, opens the sources and sets a pipe up;
 * staged.c runs it (readers, the hand-over, the loading thread's copies and retirements).
 */
#ifndef WM_STAGED_PIPE_H
#define WM_STAGED_PIPE_H

#include "host.h"
#include "jobs.h"
#include "staged.h"

#include <stdatomic.h>

#define WM__STAGED_MAX_DEVS WM_LEDGER_DEVICES

/* How the pipeline runs (staged_load.c holds it; wm__staged_tune changes it, to measure). */
typedef struct wm__staged_tuning {
    size_t window;    /* staged window (slot) size */
    unsigned slots;   /* slots per worker */
    bool serial_ring; /* register the ring before the readers start (they fault it in otherwise) */
    bool no_reap;     /* never retire finished slots early with an event query */
    /* A sleep's and a wake's copies (wm__staged_tune_swap): bytes a copy (WM__SWAP_PIECE, a
     * bounce slot's size), streams a device (WM__SWAP_STREAMS); the host copy registered whole
     * and copied from directly (no bounce ring); no huge-page advice on the host copy; no
     * faulting of the host copy in by threads first. */
    size_t swap_piece;
    unsigned swap_streams;
    bool swap_pinned_whole;
    bool swap_no_huge;
    bool swap_no_prefault;
} wm__staged_tuning;
extern wm__staged_tuning wm__staged_tuning_now;

/* File bytes [off, off + len) of one tensor segment (backend.h, wm__place), inside one window,
 * and where they land: dst bytes into the buffer of the tensor's chunk. */
typedef struct wm__piece {
    uint64_t off;
    size_t len;
    uint32_t tensor;
    uint32_t shard;
    uint64_t window; /* off / window size */
    size_t dst;
} wm__piece;

/* A file range of one shard and the pieces that lie in it. */
typedef struct wm__window {
    uint32_t shard;
    uint64_t start, end; /* from the first piece's start to the last piece's end */
    size_t first, count; /* pieces[first .. first + count) */
    uint64_t bytes;      /* tensor bytes (what progress counts) */
    bool gaps;           /* the pieces leave holes (slices): read piece by piece */
    uint32_t device;     /* the device of its first piece (the order interleaves devices) */
    uint64_t seq;        /* its rank among that device's windows */
} wm__window;

/* A slot's copies may go to several devices: an event on each device it queued copies to
 * (`pending`, a bit per device index), all of which must pass before the slot is free. */
typedef struct wm__slot {
    unsigned char *host; /* staged: the slot's part of the ring */
    unsigned char *reg;  /* registered: the window of the mapping registered now, or NULL */
    size_t reg_len;
    const unsigned char *src; /* where the window's bytes are, once filled */
    size_t win;               /* the window it holds */
    void *ev[WM__STAGED_MAX_DEVS];
    uint32_t ev_made; /* bit d: ev[d] exists */
    uint32_t pending; /* bit d: ev[d] was recorded after this slot's copies to device d */
} wm__slot;

typedef struct wm__pipe {
    wm_model *m;
    wm__dev *dv;
    unsigned char **buf; /* the chunks' device buffers */
    const wm__window *win;
    size_t n_win;
    const wm__piece *pieces;
    size_t wsize;    /* window size (a slot's bytes) */
    bool registered; /* the registered path */
    unsigned char *ring;
    const wm__region *maps; /* registered: one shared mapping per shard */
    const uint64_t *map_off;
    bool own_fds; /* rows to read: each reader reads through its own (wm__fds) */
    wm__slot *slots;
    unsigned n_slots;
    void *streams[WM__STAGED_MAX_DEVS][WM__STAGED_MAX_STREAMS];
    unsigned n_streams[WM__STAGED_MAX_DEVS]; /* streams made so far, per device */
    unsigned streams_each;                   /* streams a device gets */
    bool ring_registered;
    bool sync_made; /* mu, to_readers and to_loader exist (wm__pipe_sync_init) */

    /* The hand-over between readers and the loading thread, under mu. */
    wm_os_mutex mu;
    wm_os_cond to_readers; /* a slot was freed, or stop */
    wm_os_cond to_loader;  /* a slot was filled, or a failure */
    unsigned *free_q;      /* free slots (a stack) */
    size_t n_free;
    unsigned *filled_q; /* filled slots (a ring of n_slots) */
    size_t filled_head, n_filled;
    size_t next; /* the next window to fill */
    bool stop;   /* readers leave */
    bool failed;
    wm_error first; /* the first failure */

    /* The loading thread's own. */
    unsigned *busy_q; /* slots with copies queued, oldest first (a ring of n_slots) */
    size_t busy_head, n_busy;
    size_t issued; /* windows whose copies are queued */
    uint64_t done, total;
} wm__pipe;

/* The pipe's lock and condition variables, all or none; wm__pipe_sync_free accepts a pipe
 * without them. */
wm_status wm__pipe_sync_init(wm__pipe *p, wm_error *err);
void wm__pipe_sync_free(wm__pipe *p);
/* Runs a set-up pipe with n_readers reader threads (th: room for them; 0: the loading thread
 * fills the slots itself) until every window's copies are done or it fails; gives back its
 * streams, events and registrations before it returns. */
wm_status wm__pipe_run(wm__pipe *p, wm_os_thread *th, unsigned n_readers, wm_error *err);

#endif /* WM_STAGED_PIPE_H */
