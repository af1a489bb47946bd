/*
 * wmtrace.h: what libwmtrace.so (the interposer: tools/trace/wmtrace.c and the files beside it)
 * and `weightmap trace` (tools/trace/cmd.c and the files beside it) share: the environment
 * variables, the layout of the stats block at the start of the trace file, and the event lines
 * appended after it.
 *
 * The trace file: the tracer creates it, sized to exactly sizeof(wmtrace_stats); the traced
 * process maps that block MAP_SHARED and keeps its per-thread allocation figures and its loads
 * there (so they survive _exit and signals), and appends one text line per event with write(2)
 * (O_APPEND):
 *
 *     T_NS TID TYPE FIELDS...
 *
 * T_NS is CLOCK_MONOTONIC in nanoseconds, TID the kernel thread id. Types:
 *     X GEN PID                          a process image starts tracing (exec makes a new one)
 *     F FIDX SIZE KIND PATH              a weight file is seen for the first time (KIND gguf,
 *                                        safetensors or named)
 *     O FIDX                             the file is opened
 *     M ID FIDX ADDR LEN OFF PROT FLAGS LOAD
 *                                        a mapping of a weight file (hex ADDR, decimal rest;
 *                                        LOAD the load under way, -1 none)
 *     U ID BYTES LEFT                    BYTES of mapping ID unmapped, LEFT of it still mapped
 *     L ADDR LEN RC WEIGHT               mlock (WEIGHT 1 when it overlaps a weight mapping)
 *     K ADDR LEN RC WEIGHT               munlock
 *     A FLAGS RC / Z RC                  mlockall / munlockall
 *     B LOAD SPEC                        load LOAD (index in loads[]) begins: a load marker was
 *                                        entered (SPEC its index), or SPEC -1: a weight file
 *                                        was first touched since the last release (a load
 *                                        marker entered inside another marker's call on the
 *                                        same thread is part of that call: no B line)
 *     E LOAD END_NS                      load LOAD ends (its marker returned; or it began at a file
 *                                        touch and a release began: END_NS, when its last weight
 *                                        file was closed, if that came first)
 *     r SPEC                             a release marker was entered (the outermost on its
 *                                        thread: one inside another marker's call is part of it)
 *     R SOURCE LOAD KEPT SCRATCH PAIR KEPT_RES
 *                                        the release returned (SOURCE: the marker spec, or the
 *                                        signal's name); LOAD the load it released (-1 none),
 *                                        KEPT the bytes of that load's malloc blocks still held,
 *                                        SCRATCH the bytes of that load's scratch blocks still
 *                                        resident outside live big blocks (-1: not known), PAIR
 *                                        "handle" (the release received the handle that load
 *                                        returned) or "time" (the last load begun before it),
 *                                        KEPT_RES the resident bytes (whole pages) of KEPT
 *     n SPEC HANDLE                      a release marker returned for a handle no live load
 *                                        returned (0, another object): not a release of a load
 *     S NAME TABLE                       an object was searched for the markers' symbols (TABLE:
 *                                        symtab, dynsym, or none when its file could not be read)
 *     P FOOTPRINT RSS FILE LOCKED MAPS WMAPS MFREE
 *                                        the process's figures now (at its start, at each load's
 *                                        start and end, after each release, at exit): footprint
 *                                        (RssAnon + VmSwap + RssShmem), VmRSS, RssFile, VmLck,
 *                                        mappings in /proc/self/maps (0 at a load), live weight
 *                                        mappings, and the free bytes malloc holds (mallinfo2
 *                                        fordblks); a figure that could not be read is "-"
 *     Q                                  the process image ran its destructors (normal exit)
 *     W TEXT                             a warning from the interposer
 */
#ifndef WMTRACE_H
#define WMTRACE_H

#include <stdint.h>

/* Environment the tracer sets for the traced command. */
#define WMTRACE_ENV_OUT "WMTRACE_OUT"     /* the trace file (required) */
#define WMTRACE_ENV_PID "WMTRACE_PID"     /* only this process traces; others stay dormant */
#define WMTRACE_ENV_FILES "WMTRACE_FILES" /* extra weight files, separated by '\n' */
#define WMTRACE_ENV_MARKERS                                                                        \
    "WMTRACE_MARKERS"                       /* marker specs, one a line: "L SPEC" (a load:         \
                                               entry to return) or "R SPEC" (its return            \
                                               means "released"); SPEC is SYMBOL,                  \
                                               OBJECT:SYMBOL or OBJECT+0xOFFSET, and may           \
                                               end in =ret, =argN or =*argN: where the             \
                                               handle is (a load's return value, a                 \
                                               release's argument N, the pointer argument          \
                                               N points to at the return). "l SPEC RT" /           \
                                               "r SPEC RT": a known runtime RT's marker            \
                                               (RT "ggml": used only where no other                \
                                               known runtime's marker was hooked) */
#define WMTRACE_ENV_SIGNAL "WMTRACE_SIGNAL" /* the release signal's number */

#define WMTRACE_MAGIC 0x3345434152544d57ull /* "WMTRACE3" */
#define WMTRACE_VERSION 3
#define WMTRACE_MAX_THREADS 512
#define WMTRACE_MAX_LOADS 256
#define WMTRACE_MAX_SPECS 48 /* the user's 16 and the known runtimes' */
/* Size classes of "held at exit": below 64 KiB, 64 KiB-1 MiB, 1-16 MiB, 16 MiB and more. */
#define WMTRACE_CLASSES 4
#define WMTRACE_BIG ((uint64_t)64 << 10) /* blocks from here on are tracked one by one */

typedef struct wmtrace_thread {
    int64_t tid;
    char name[16];
    uint64_t n_alloc;              /* malloc-family calls that returned memory */
    uint64_t bytes_alloc;          /* bytes asked for by them */
    uint64_t largest;              /* largest single allocation (bytes asked for) */
    uint64_t largest_loading;      /* largest made while a load was under way */
    int64_t held[WMTRACE_CLASSES]; /* bytes still held, by size class (class 0: net of the
                                       frees this thread made, small blocks are not tracked
                                       one by one) */
    uint64_t anon_maps;            /* anonymous mmaps made by this thread */
    uint64_t anon_largest;
    int64_t anon_held;     /* anonymous mapped bytes this thread made still mapped */
    uint64_t loader;       /* read from or mapped a weight file at least once */
    uint64_t weight_read;  /* bytes read from weight files */
    uint64_t freed_others; /* bytes of big blocks it freed that another thread allocated */
} wmtrace_thread;

/* One load: a load marker's call (entry to return), or, without load markers, the time from the
 * first touch of a weight file after a release to the next release's start. Its malloc blocks
 * (64 KiB and more, allocated by any thread while it was under way) are followed to their free:
 * freed before it ended is scratch; held past its end is what the load built (weights, when the
 * runtime reads them into malloc memory). */
typedef struct wmtrace_load {
    uint64_t begin_ns, end_ns; /* end_ns 0: not ended */
    int64_t tid;               /* the thread it began on */
    int64_t spec;              /* the load marker's spec index; -1: from the first file touch */
    uint64_t blocks, bytes;    /* big blocks allocated while it was under way */
    uint64_t scratch, scratch_largest, scratch_blocks; /* of them, freed before it ended */
    uint64_t kept;                                     /* of them, held now */
    uint64_t kept_at_end, kept_largest;                /* held when it ended; the largest block */
    uint64_t freed_in_release; /* held past its end and freed while a release marker ran */
    int64_t release_tid;       /* the thread that freed them (the last one) */
    uint64_t freed_other;      /* held past its end and freed outside a release */
    uint64_t handle;           /* what its marker returned (the handle a release receives); 0 */
    uint64_t released;         /* a release received its handle */
    uint64_t kept_resident;    /* of kept_at_end, the resident bytes (whole pages) at its end */
} wmtrace_load;

typedef struct wmtrace_spec {
    char text[96];   /* as given */
    uint64_t kind;   /* 'L' or 'R' */
    uint64_t sites;  /* places it was hooked at (definitions in loaded objects) */
    uint64_t hits;   /* calls seen */
    char object[64]; /* the object of the first site (basename) */
    uint64_t known;  /* 0: the user's; 1: a known runtime's; 2: a fallback (ggml's buffers) */
    char runtime[24];
    uint64_t handle;   /* where the handle is: 0 none, 1 the return value, 10+N argument N,
                          20+N what argument N points to at the return */
    uint64_t searched; /* objects searched for it (their names matched OBJECT) */
    uint64_t unpaired; /* release calls for no live load's handle */
} wmtrace_spec;

typedef struct wmtrace_stats {
    uint64_t magic, version, size;
    int64_t pid;
    uint64_t generation;      /* process images traced (exec starts a new one) */
    uint64_t n_threads;       /* slots used in threads[] */
    uint64_t dropped_threads; /* threads beyond WMTRACE_MAX_THREADS (not counted) */
    uint64_t dropped_blocks;  /* big blocks the table had no room for (held figures miss them) */
    uint64_t markers;         /* releases seen */
    uint64_t tracer_bytes;    /* the interposer's own static tables (part of the footprint) */
    uint64_t n_specs, n_loads, dropped_loads;
    wmtrace_spec specs[WMTRACE_MAX_SPECS];
    wmtrace_load loads[WMTRACE_MAX_LOADS];
    wmtrace_thread threads[WMTRACE_MAX_THREADS];
} wmtrace_stats;

#endif
