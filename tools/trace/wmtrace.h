/*
 * wmtrace.h: what libwmtrace.so (the interposer, tools/trace/wmtrace.c) and `weightmap trace`
 * (tools/trace.c) share: the environment variables, the layout of the stats block at the start
 * of the trace file, and the event lines appended after it.
 *
 * The trace file: the tracer creates it, sized to exactly sizeof(wmtrace_stats); the traced
 * process maps that block MAP_SHARED and keeps its per-thread allocation figures there (so they
 * survive _exit and signals), and appends one text line per event with write(2) (O_APPEND):
 *
 *     T_NS TID TYPE FIELDS...
 *
 * T_NS is CLOCK_MONOTONIC in nanoseconds, TID the kernel thread id. Types:
 *     X GEN PID                          a process image starts tracing (exec makes a new one)
 *     F FIDX SIZE KIND PATH              a weight file is seen for the first time (KIND gguf,
 *                                        safetensors or named)
 *     O FIDX                             the file is opened (one load)
 *     M ID FIDX ADDR LEN OFF PROT FLAGS  a mapping of a weight file (hex ADDR, decimal rest)
 *     U ID BYTES LEFT                    BYTES of mapping ID unmapped, LEFT of it still mapped
 *     L ADDR LEN RC WEIGHT               mlock (WEIGHT 1 when it overlaps a weight mapping)
 *     K ADDR LEN RC WEIGHT               munlock
 *     A FLAGS RC / Z RC                  mlockall / munlockall
 *     R SOURCE                           the runtime released its model (SOURCE: the marker
 *                                        symbol's name, or SIGUSR1)
 *     S FOOTPRINT RSS                    footprint sample taken in the process at an event
 *     Q                                  the process image ran its destructors (normal exit)
 *     W TEXT                             a warning from the interposer
 */
#ifndef WMTRACE_H
#define WMTRACE_H

#include <stdint.h>

/* Environment the tracer sets for the traced command. */
#define WMTRACE_ENV_OUT "WMTRACE_OUT"       /* the trace file (required) */
#define WMTRACE_ENV_PID "WMTRACE_PID"       /* only this process traces; others stay dormant */
#define WMTRACE_ENV_FILES "WMTRACE_FILES"   /* extra weight files, separated by '\n' */
#define WMTRACE_ENV_MARKER "WMTRACE_MARKER" /* a dynamic symbol whose return means "released" */

#define WMTRACE_MAGIC 0x3145434152544d57ull /* "WMTRACE1" */
#define WMTRACE_VERSION 1
#define WMTRACE_MAX_THREADS 512
/* Size classes of "held at exit": below 64 KiB, 64 KiB-1 MiB, 1-16 MiB, 16 MiB and more. */
#define WMTRACE_CLASSES 4
#define WMTRACE_BIG ((uint64_t)64 << 10) /* blocks from here on are tracked one by one */

typedef struct wmtrace_thread {
    int64_t tid;
    char name[16];
    uint64_t n_alloc;              /* malloc-family calls that returned memory */
    uint64_t bytes_alloc;          /* bytes asked for by them */
    uint64_t largest;              /* largest single allocation (bytes asked for) */
    uint64_t largest_loading;      /* largest made while this thread was loading (see loader) */
    int64_t held[WMTRACE_CLASSES]; /* bytes still held, by size class (class 0: net of the
                                       frees this thread made, small blocks are not tracked
                                       one by one) */
    uint64_t anon_maps;            /* anonymous mmaps made by this thread */
    uint64_t anon_largest;
    int64_t anon_held;    /* anonymous mapped bytes this thread made still mapped */
    uint64_t loader;      /* read from or mapped a weight file at least once */
    uint64_t weight_read; /* bytes read from weight files */
} wmtrace_thread;

typedef struct wmtrace_stats {
    uint64_t magic, version, size;
    int64_t pid;
    uint64_t generation;      /* process images traced (exec starts a new one) */
    uint64_t n_threads;       /* slots used in threads[] */
    uint64_t dropped_threads; /* threads beyond WMTRACE_MAX_THREADS (not counted) */
    uint64_t dropped_blocks;  /* big blocks the table had no room for (held figures miss them) */
    uint64_t markers;         /* release markers seen */
    uint64_t marker_patched;  /* call sites of the marker symbol redirected */
    uint64_t tracer_bytes;    /* the interposer's own static tables (part of the footprint) */
    char marker[64];
    wmtrace_thread threads[WMTRACE_MAX_THREADS];
} wmtrace_stats;

#endif
