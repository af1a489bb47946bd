/*
 * reader.h: the reader, the lowest part of the reading engine (engine.h). Every byte weightmap
 * reads from a weight file into memory goes through wm__read (reader.c), whoever reads: the job
 * runner's threads (run.c: a CPU heap load, wm_file_read_tensors), the staged pipeline's readers
 * (src/backend/staged.c) and the read ahead (prefetch.c). It needs no model: a reader context
 * (wm__reader) over an open wm_file is all it uses.
 *
 * How a range is read is decided here, per range, by the I/O policy (wm_direct_io):
 *   WM_DIRECT_AUTO  what is in the page cache is read buffered (a copy from memory), what is
 *                   not with O_DIRECT (from the disk, past the page cache: no readahead, no
 *                   second copy, the disk's own speed); the page cache is asked per range
 *                   (wm__os_cached: cachestat on Linux), and a mixed range is halved until each
 *                   part is one or the other (down to single 4 KiB blocks).
 *   WM_DIRECT_OFF   every read through the page cache.
 *   WM_DIRECT_ON    every read with O_DIRECT where the file system allows it.
 * O_DIRECT needs offset, length and memory aligned to WM_OS_DIRECT_ALIGN. A direct read lands
 * either in the destination itself, when it mirrors the file on that grid (wm__read_req.mirror:
 * the staged pipeline's slots), or, where it agrees with the file on that grid but may not be
 * written past its bytes (a tensor in a buffer laid out as the file), its whole blocks in place
 * and its partial first and last blocks through the staging; or else all of it in the calling
 * thread's staging (wm__stage: page-allocated, WM__STAGE_BYTES, made at its first direct read,
 * counted as scratch) and is copied into place.
 * A file system that refuses O_DIRECT (EINVAL: tmpfs before 6.6, some FUSE) turns direct reads
 * off for the rest of the reader's life; a shard whose O_DIRECT descriptor cannot be opened is
 * read buffered. Either way the bytes are the same: only the route differs, and the reader
 * counts bytes by route (direct_bytes, buffered_bytes) so that tests can see which was taken.
 *
 * Thread safety: one reader serves every thread of a load at once (its counters are atomic, the
 * direct descriptors are opened once each, by whichever thread needs one first); a wm__stage
 * belongs to one thread.
 */
#ifndef WM_READER_H
#define WM_READER_H

#include "../internal.h"

#include <stdatomic.h>
#include <stdbool.h>

/* A thread's staging for direct reads whose destination does not mirror the file. */
#define WM__STAGE_BYTES ((size_t)2 << 20)

typedef struct wm__reader {
    const wm_file *file;
    wm_direct_io io;
    _Atomic int *direct_fd;        /* per shard: -2 not opened yet, -1 none (read buffered), or the
                                      O_DIRECT descriptor; NULL for WM_DIRECT_OFF */
    size_t table_len;              /* bytes of pages under direct_fd (scratch) */
    atomic_bool direct_off;        /* a direct read was refused (EINVAL): buffered from then on */
    _Atomic uint64_t bytes_read;   /* bytes that came from the file (direct: the aligned cover) */
    _Atomic uint64_t direct_bytes; /* requested bytes read with O_DIRECT */
    _Atomic uint64_t buffered_bytes;   /* requested bytes read through the page cache */
    _Atomic uint64_t prefetched_bytes; /* requested bytes copied from the file's read ahead */
    bool no_prefetch; /* the read ahead's own reader: it reads, it does not take (prefetch.c) */
} wm__reader;

/* A reader of `f` with policy `io`. WM_ENOMEM (nothing held) or WM_OK; wm__reader_free is its
 * release. Opens no descriptor: each shard's O_DIRECT one comes at its first direct read. */
wm_status wm__reader_init(wm__reader *rd, const wm_file *f, wm_direct_io io, wm_error *err);
/* Closes the direct descriptors and frees the table; accepts a zeroed or freed reader; leaves
 * the counters as they are (a load copies them into its stats after this). */
void wm__reader_free(wm__reader *rd);

/* Opens shard `shard`'s O_DIRECT descriptor now (where the policy and the file system allow it)
 * rather than at its first direct read, where threads that start together would each open one
 * and all but the first close theirs again. A hint: a failure reads the shard buffered. */
void wm__reader_open(wm__reader *rd, uint32_t shard);

/* One thread's staging (zeroed before first use), and the two blocks it reads a destination's
 * partial first and last blocks into when the rest lands in place (edge: a page allocation of
 * its own, so that such reads cost 8 KiB, not a staging); wm__stage_free gives both back. */
typedef struct wm__stage {
    unsigned char *p;
    size_t len;
    unsigned char *edge; /* 2 * WM_OS_DIRECT_ALIGN bytes */
} wm__stage;
void wm__stage_free(wm__stage *s);

/* Bytes [off, off + len) of shard `shard`, into dst. */
typedef struct wm__read_req {
    uint32_t shard;
    int fd; /* the buffered descriptor to read through: the thread's own or the shard's */
    uint64_t off;
    size_t len;
    unsigned char *dst;
    uint32_t tensor; /* the tensor the bytes belong to: named when the file is short */
    /* dst mirrors the file on the WM_OS_DIRECT_ALIGN grid: (uintptr_t)dst and off agree modulo
     * it, and the memory of the aligned blocks that cover [off, off + len) may be written with
     * the file's bytes (a slot that holds a window of the file). A direct read then lands in
     * place. Otherwise only [dst, dst + len) is written. */
    bool mirror;
    /* One of a stream of short requests in file order (the rows of a slice): under AUTO read
     * buffered without asking the page cache, since the kernel's readahead is what serves such
     * a stream, and a question per row would cost as much as the row's read. */
    bool rows;
} wm__read_req;

/* Reads the request by the reader's policy (what the file's read ahead holds, wm_file_prefetch,
 * copied from it first, through wm_file.ahead_take): every byte of [off, off + len) must come, or
 * the read fails with WM_EFORMAT naming the tensor (the file is shorter than its header says); a
 * read error is WM_EIO (or as the errno says) naming the file, the offset and, for a direct
 * read, " (direct)"; WM_ENOMEM when the thread's staging cannot be made. `stage` may be NULL
 * (then a destination that does not mirror the file is read buffered). Any thread. */
wm_status wm__read(wm__reader *rd, const wm__read_req *q, wm__stage *stage, wm_error *err);

#endif /* WM_READER_H */
