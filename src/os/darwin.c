/*
 * darwin.c: the half of os.h that only Darwin (macOS, iOS) has, beside unix.c: what this OS can
 * do (wm_os_caps); reopening a descriptor through fcntl(F_GETPATH), plain or uncached
 * (F_NOCACHE); what of a file is cached (mincore, unix.c's); pages from the Mach VM (vm_allocate,
 * vm_deallocate); mlock; madvise; the per-task scope (an Objective-C autorelease pool, through the
 * runtime's C functions found at run time); libmalloc's pressure relief; and the memory figures of
 * a process from Mach and libproc: task_info(TASK_VM_INFO) for this process (phys_footprint, the
 * figure jetsam and Xcode's gauge read), proc_pid_rusage for another, the regions of files from
 * proc_pidinfo (PROC_PIDREGIONPATHINFO), this process's locked and committed bytes from
 * vm_region_recurse_64.
 *
 * Built and linked for aarch64-macos in `make test` (Zig's toolchain; make darwin), never run
 * here: docs/PORTING.md says what a first run on a Mac must check, in order.
 *
 * Sections: capabilities; files; the page cache; pages; locking; advice; errors; tasks and the
 * heap; the figures (Mach and libproc errors, regions, this process, another process); the CPU.
 */
#include "os.h"
#include "unix.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libproc.h>
#include <mach/mach.h>
#include <malloc/malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/param.h>
#include <sys/proc_info.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- capabilities ---- */

const wm_os_caps *wm__os_caps(void) {
    static const wm_os_caps caps = {
        .name = "darwin",
        .reopen = true,      /* fcntl(F_GETPATH), then open, checked by device and inode */
        .direct_io = true,   /* F_NOCACHE: no alignment rule of its own */
        .populate = false,   /* no MADV_POPULATE_*: the prefetch falls back to WILLNEED */
        .huge_pages = false, /* no transparent huge pages on arm64 */
        .process_info = true,
        .other_process = true, /* proc_pid_rusage, proc_pidinfo: the same user, or root */
    };
    return &caps;
}

/* ---- files ----
 * Darwin has no /proc/self/fd: the descriptor's path (F_GETPATH, MAXPATHLEN bytes) is opened
 * again and both are fstat'ed, so a path replaced since the first open is refused (ESTALE), not
 * followed to another file. */

static int reopen(int fd, int nocache, int *fd_out) {
    int e = wm__fault_hit(WM_OS_OPEN);
    if (e) return e;
    char path[MAXPATHLEN];
    if (fcntl(fd, F_GETPATH, path) == -1) return errno;
    int nfd;
    if ((e = wm__unix_open(path, 0, &nfd))) return e;
    struct stat a, b;
    if (fstat(fd, &a) != 0 || fstat(nfd, &b) != 0) {
        e = errno;
        close(nfd);
        return e;
    }
    if (a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
        close(nfd);
        return ESTALE;
    }
    /* F_NOCACHE: reads through this descriptor neither fill nor keep the unified buffer cache
     * (pages already cached are still read from it). The one way to read around the cache on
     * Darwin; it has no alignment rule, so WM_OS_DIRECT_ALIGN's reads are simply valid here. */
    if (nocache && fcntl(nfd, F_NOCACHE, 1) == -1) {
        e = errno;
        close(nfd);
        return e;
    }
    *fd_out = nfd;
    return 0;
}

int wm__os_reopen(int fd, int *fd_out) { return reopen(fd, 0, fd_out); }
int wm__os_reopen_direct(int fd, int *fd_out) { return reopen(fd, 1, fd_out); }

/* ---- the page cache ----
 * unix.c's mincore over a transient mapping of the range. On Darwin a file's cached pages are
 * its vnode's VM object (the unified buffer cache), and mincore answers from the object, not
 * only from the pages the mapping itself faulted in: a page that a read() brought in counts, as
 * vmtouch measures the cache on macOS. So a cold range goes to the F_NOCACHE descriptor and a
 * warm one is read buffered, as on Linux (never run here: docs/PORTING.md, first run). */

int wm__os_cached(int fd, uint64_t off, uint64_t len, uint64_t *cached_out) {
    int e = wm__fault_hit(WM_OS_ADVISE);
    return e ? e : wm__unix_cached(fd, off, len, cached_out);
}

/* No count of the kernel's own over a range here (mincore is a lookup per page). */
int wm__os_cache_count(int fd, uint64_t off, uint64_t len, uint64_t *cached_out) {
    (void)fd, (void)off, (void)len, (void)cached_out;
    int e = wm__fault_hit(WM_OS_ADVISE);
    return e ? e : ENOSYS;
}

int wm__os_file_drop(int fd, uint64_t off, uint64_t len) {
    (void)fd, (void)off, (void)len;
    return ENOTSUP; /* no per-range drop of clean pages on Darwin */
}

int wm__os_file_readahead(int fd, bool on) {
    int e = wm__fault_hit(WM_OS_ADVISE);
    if (e) return e;
    return fcntl(fd, F_RDAHEAD, on ? 1 : 0) == -1 ? errno : 0;
}

/* ---- pages ----
 * Straight from the Mach VM: zero-filled, page-aligned (16 KiB on Apple silicon), returned to
 * the system by vm_deallocate, never through libmalloc (whose zones keep freed memory). Tagged,
 * so that vmmap and footprint(1) list weightmap's pages as "Memory Tag 240" (the first tag Mach
 * leaves to applications), apart from everyone's malloc. */

#define WM_VM_TAG VM_MEMORY_APPLICATION_SPECIFIC_1

static int kern_errno(kern_return_t kr) {
    switch (kr) {
    case KERN_SUCCESS: return 0;
    case KERN_INVALID_ADDRESS: return EFAULT;
    case KERN_PROTECTION_FAILURE: return EACCES;
    case KERN_NO_SPACE:
    case KERN_RESOURCE_SHORTAGE: return ENOMEM;
    case KERN_INVALID_ARGUMENT: return EINVAL;
    case KERN_NO_ACCESS: return EPERM;
    default: return EIO;
    }
}

int wm__os_pages_alloc(size_t len, void **out) {
    int e = wm__fault_hit(WM_OS_PAGES);
    if (e) return e;
    if (len == 0) return EINVAL;
    vm_address_t addr = 0;
    kern_return_t kr = vm_allocate(mach_task_self(), &addr, (vm_size_t)len,
                                   VM_FLAGS_ANYWHERE | VM_MAKE_TAG(WM_VM_TAG));
    if (kr != KERN_SUCCESS) return kern_errno(kr);
    *out = (void *)addr;
    return 0;
}

void wm__os_pages_free(void *addr, size_t len) {
    if (addr && len) vm_deallocate(mach_task_self(), (vm_address_t)addr, (vm_size_t)len);
}

/* ---- locking ----
 * mlock wires the pages (macOS: within RLIMIT_MEMLOCK; iOS refuses apps with EPERM, so a
 * lock-required load is refused and a best-effort one locks nothing). */

int wm__os_lock(void *addr, size_t len) {
    int e = wm__fault_hit(WM_OS_LOCK);
    if (e) return e;
    return mlock(addr, len) == 0 ? 0 : errno;
}

void wm__os_unlock(void *addr, size_t len) {
    if (addr && len) munlock(addr, len);
}

/* ---- advice ----
 * madvise has WILLNEED (for a file mapping: read-ahead of the range into the cache, what
 * F_RDADVISE does for a descriptor) and SEQUENTIAL. Populate and huge pages do not exist: EINVAL,
 * as caps says, and the callers treat it as a hint not taken (cpu.c falls back to WILLNEED). */

int wm__os_advise(void *addr, size_t len, wm_os_advice advice) {
    int e = wm__fault_hit(WM_OS_ADVISE);
    if (e) return e;
    int adv;
    switch (advice) {
    case WM_OS_ADV_WILLNEED: adv = MADV_WILLNEED; break;
    case WM_OS_ADV_SEQUENTIAL: adv = MADV_SEQUENTIAL; break;
    case WM_OS_ADV_RANDOM: adv = MADV_RANDOM; break;
    default: return EINVAL;
    }
    return wm__unix_madvise(addr, len, adv);
}

/* ---- errors ----
 * Darwin's strerror writes unknown values into one static buffer: strerror_r into the calling
 * thread's own instead. */

const char *wm__os_strerror(int e) {
    static _Thread_local char text[128];
    return strerror_r(e, text, sizeof text) == 0 ? text : NULL;
}

/* ---- tasks and the heap ----
 * An Objective-C object that a task autoreleases (every Metal command buffer and encoder,
 * Foundation's strings) is freed when the innermost autorelease pool pops. A worker thread or a
 * caller's long-lived thread that runs a release has none of its own until it exits, so without
 * a pool per task those objects, and the memory they hold, pile up: the fault llama.rn's release
 * on its worker thread had. Each task runs between objc_autoreleasePoolPush and Pop, libobjc's C
 * entry points, found with dlsym so that a C-only build needs neither an Objective-C compiler nor
 * a link to libobjc. A process without the Objective-C runtime loaded has no such objects: the
 * task runs bare, and the lookup is tried again next time (a library such as Metal, loaded later,
 * brings the runtime in). Found once, the pair is kept (libobjc is never unloaded). */

typedef void *(*pool_push_fn)(void);
typedef void (*pool_pop_fn)(void *);

static _Atomic(void *) pool_push_sym, pool_pop_sym;

static int pool_funcs(pool_push_fn *push, pool_pop_fn *pop) {
    void *ps = atomic_load_explicit(&pool_push_sym, memory_order_acquire);
    void *pp = atomic_load_explicit(&pool_pop_sym, memory_order_relaxed);
    if (!ps) {
        pp = dlsym(RTLD_DEFAULT, "objc_autoreleasePoolPop");
        ps = pp ? dlsym(RTLD_DEFAULT, "objc_autoreleasePoolPush") : NULL;
        if (!ps) return 0;
        atomic_store_explicit(&pool_pop_sym, pp, memory_order_relaxed);
        atomic_store_explicit(&pool_push_sym, ps, memory_order_release);
    }
    /* POSIX: a dlsym result converts to a function pointer; memcpy says so in ISO C */
    memcpy(push, &ps, sizeof *push);
    memcpy(pop, &pp, sizeof *pop);
    return 1;
}

void wm__os_task_scope(void (*fn)(void *), void *arg) {
    pool_push_fn push;
    pool_pop_fn pop;
    if (!pool_funcs(&push, &pop)) {
        fn(arg);
        return;
    }
    void *pool = push();
    fn(arg);
    pop(pool);
}

/* libmalloc's zones give their free pages back (the counterpart of glibc's malloc_trim). */
void wm__os_heap_trim(void) { malloc_zone_pressure_relief(NULL, 0); }

/* ---- the figures: Mach and libproc calls ----
 * Each query counts as a PREAD for fault injection (what the figures read), and an injected
 * EINTR is retried like a real one. Nothing is allocated: every answer lands on the stack. */

static int query_fault(void) {
    int e;
    while ((e = wm__fault_hit(WM_OS_PREAD)) == EINTR) {
    }
    return e;
}

static void name_source(wm_os_why *why, const char *call, int pid) {
    if (pid == 0)
        snprintf(why->source, sizeof why->source, "%s (this process)", call);
    else
        snprintf(why->source, sizeof why->source, "%s (pid %d)", call, pid);
    why->detail = NULL;
}

static uint64_t page_bytes(uint32_t pages) { return (uint64_t)pages * wm__os_page_size(); }

static int shared_mode(uint32_t mode) {
    return mode == SM_SHARED || mode == SM_TRUESHARED || mode == SM_SHARED_ALIASED;
}

/* What Linux calls the data segment (VmData): writable private address space, anonymous or a
 * private mapping of a file, touched or not. */
static int committed_mode(uint32_t prot, uint32_t mode) {
    return (prot & VM_PROT_WRITE) &&
           (mode == SM_PRIVATE || mode == SM_COW || mode == SM_EMPTY || mode == SM_PRIVATE_ALIASED);
}

/* ---- regions, from proc_pidinfo(PROC_PIDREGIONPATHINFO) ----
 * Walked from address 0: each answer is the region at or after the address asked for, so the
 * next address is that region's end. The vnode part is filled only when the region's memory
 * object is a file (not proc_regionfilename, which answers for an anonymous address with the
 * path of the next file's region). */

typedef struct region_walk {
    int pid; /* the real pid (getpid() for 0) */
    int (*each)(void *user, const struct proc_regionwithpathinfo *ri);
    void *user;
} region_walk;

static int walk_regions(const region_walk *w, wm_os_why *why) {
    struct proc_regionwithpathinfo ri;
    uint64_t addr = 0;
    for (;;) {
        int e = query_fault();
        if (e) return e;
        errno = 0;
        int got = proc_pidinfo(w->pid, PROC_PIDREGIONPATHINFO, addr, &ri, (int)sizeof ri);
        if (got <= 0) {
            e = errno;
            /* past the last region the kernel answers EINVAL (or nothing) */
            if (e == 0 || e == EINVAL) return 0;
            return e; /* ESRCH: no such process (or it exited mid-walk); EPERM */
        }
        if ((size_t)got < sizeof ri) {
            why->detail = "proc_pidinfo answered with a short region record";
            return ENOENT;
        }
        uint64_t end = ri.prp_prinfo.pri_address + ri.prp_prinfo.pri_size;
        if ((e = w->each(w->user, &ri))) return e;
        if (end <= addr) return 0; /* never walk backwards */
        addr = end;
    }
}

typedef struct file_walk {
    int (*each)(void *user, const wm_os_region *r);
    void *user;
} file_walk;

static void region_fill(wm_os_region *g, const struct proc_regionwithpathinfo *ri) {
    const struct proc_regioninfo *p = &ri->prp_prinfo;
    memset(g, 0, sizeof *g);
    g->start = p->pri_address;
    g->end = p->pri_address + p->pri_size;
    g->offset = p->pri_offset;
    /* as wm__os_stat reports them: dev_t is 32 bits and signed on Darwin */
    g->dev = (uint64_t)(dev_t)ri->prp_vip.vip_vi.vi_stat.vst_dev;
    g->ino = ri->prp_vip.vip_vi.vi_stat.vst_ino;
    g->perms[0] = p->pri_protection & VM_PROT_READ ? 'r' : '-';
    g->perms[1] = p->pri_protection & VM_PROT_WRITE ? 'w' : '-';
    g->perms[2] = p->pri_protection & VM_PROT_EXECUTE ? 'x' : '-';
    g->perms[3] = shared_mode(p->pri_share_mode) ? 's' : 'p';
    const char *path = ri->prp_vip.vip_path;
    size_t n = strnlen(path, sizeof ri->prp_vip.vip_path);
    size_t k = n < sizeof g->path ? n : sizeof g->path - 1;
    memcpy(g->path, path, k);
    k = n > 32 ? 32 : n;
    memcpy(g->name_tail, path + n - k, k);
    g->rss = page_bytes(p->pri_pages_resident);
    /* Copied from the file into private memory: the pages found in the region's own (shadow)
     * object, and those of them the compressor or swap holds (a file's clean pages are dropped,
     * never swapped, so a swapped page of a file region is a private copy). */
    g->privatised =
        page_bytes(p->pri_pages_shared_now_private) + page_bytes(p->pri_pages_swapped_out);
    g->private_dirty = shared_mode(p->pri_share_mode) ? 0 : page_bytes(p->pri_pages_dirtied);
    /* mlock clips the map entry to the locked range and wires all of it */
    g->locked = p->pri_user_wired_count ? p->pri_size : 0;
}

static int is_file_region(const struct proc_regionwithpathinfo *ri) {
    return ri->prp_vip.vip_vi.vi_stat.vst_ino != 0 && ri->prp_vip.vip_path[0] != '\0' &&
           !(ri->prp_prinfo.pri_flags & PROC_REGION_SUBMAP);
}

static int take_file_region(void *user, const struct proc_regionwithpathinfo *ri) {
    const file_walk *fw = user;
    if (!is_file_region(ri)) return 0;
    wm_os_region g;
    region_fill(&g, ri);
    return fw->each(fw->user, &g);
}

int wm__os_file_regions(int pid, int (*each)(void *user, const wm_os_region *r), void *user,
                        wm_os_why *why) {
    name_source(why, "proc_pidinfo(PROC_PIDREGIONPATHINFO)", pid);
    if (pid < 0) return EINVAL;
    file_walk fw = {each, user};
    region_walk w = {pid ? pid : getpid(), take_file_region, &fw};
    return walk_regions(&w, why);
}

/* ---- this process: task_info and vm_region_recurse_64 ----
 * phys_footprint is the footprint: dirty private memory, what the compressor holds, IOKit and
 * Metal memory charged to the task; it is what jetsam compares with the app's limit. resident
 * is resident_size, file-resident the task's external (file-backed) resident pages. Locked and
 * committed come from a walk of the task's map entries at the top level (the shared cache, one
 * submap, is the system's and is skipped). */

static int self_map_figures(wm_os_process_info *info, wm_os_why *why) {
    vm_address_t addr = 0;
    for (;;) {
        int e = query_fault();
        if (e) return e;
        vm_size_t size = 0;
        natural_t depth = 0;
        vm_region_submap_info_data_64_t ri;
        mach_msg_type_number_t count = VM_REGION_SUBMAP_INFO_COUNT_64;
        kern_return_t kr = vm_region_recurse_64(mach_task_self(), &addr, &size, &depth,
                                                (vm_region_recurse_info_t)&ri, &count);
        if (kr == KERN_INVALID_ADDRESS) return 0; /* past the last entry */
        if (kr != KERN_SUCCESS) {
            name_source(why, "vm_region_recurse_64", 0);
            return kern_errno(kr);
        }
        if (!ri.is_submap) {
            if (ri.user_wired_count) info->locked += size;
            if (committed_mode((uint32_t)ri.protection, ri.share_mode)) info->committed += size;
        }
        if (addr + size <= addr) return 0;
        addr += size;
    }
}

static int self_info(wm_os_process_info *out, wm_os_why *why) {
    name_source(why, "task_info(TASK_VM_INFO)", 0);
    int e = query_fault();
    if (e) return e;
    task_vm_info_data_t vi;
    mach_msg_type_number_t count = TASK_VM_INFO_COUNT;
    kern_return_t kr = task_info(mach_task_self(), TASK_VM_INFO, (task_info_t)&vi, &count);
    if (kr != KERN_SUCCESS) return kern_errno(kr);
    if (count < TASK_VM_INFO_REV1_COUNT) {
        why->detail = "the kernel's TASK_VM_INFO has no phys_footprint (macOS 10.11 or later has)";
        return ENOENT;
    }
    wm_os_process_info info = {0};
    info.footprint = vi.phys_footprint;
    info.resident = vi.resident_size;
    info.file_resident = vi.external;
    if ((e = self_map_figures(&info, why))) return e;
    *out = info;
    return 0;
}

/* ---- another process: proc_pid_rusage and proc_pidinfo (the same user, or root) ---- */

static int sum_region(void *user, const struct proc_regionwithpathinfo *ri) {
    wm_os_process_info *info = user;
    const struct proc_regioninfo *p = &ri->prp_prinfo;
    if (p->pri_flags & PROC_REGION_SUBMAP) return 0;
    if (p->pri_user_wired_count) info->locked += p->pri_size;
    if (committed_mode(p->pri_protection, p->pri_share_mode)) info->committed += p->pri_size;
    if (is_file_region(ri)) info->file_resident += page_bytes(p->pri_pages_resident);
    return 0;
}

static int other_info(int pid, wm_os_process_info *out, wm_os_why *why) {
    name_source(why, "proc_pid_rusage(RUSAGE_INFO_V0)", pid);
    int e = query_fault();
    if (e) return e;
    struct rusage_info_v0 ru;
    if (proc_pid_rusage(pid, RUSAGE_INFO_V0, (rusage_info_t *)(void *)&ru) != 0)
        return errno ? errno : ESRCH;
    wm_os_process_info info = {0};
    info.footprint = ru.ri_phys_footprint;
    info.resident = ru.ri_resident_size;
    name_source(why, "proc_pidinfo(PROC_PIDREGIONPATHINFO)", pid);
    region_walk w = {pid, sum_region, &info};
    if ((e = walk_regions(&w, why))) return e;
    *out = info;
    return 0;
}

int wm__os_process_info(int pid, wm_os_process_info *out, wm_os_why *why) {
    if (pid < 0) {
        name_source(why, "wm__os_process_info", pid);
        return EINVAL;
    }
    return pid == 0 ? self_info(out, why) : other_info(pid, out, why);
}

/* ---- the CPU ----
 * Advanced SIMD is part of every arm64 CPU Darwin runs on (sysctl hw.optional.neon is always 1
 * there); Darwin on x86-64 has none. */

/* ---- memory the system has ---- */

/* os_proc_available_memory (<os/proc.h>) exists on iOS 13, tvOS 13 and watchOS 6 and later: the
 * bytes this process may still take before jetsam ends it. macOS declares it unavailable and has
 * no per-process limit of that kind; its figure stays unknown (UINT64_MAX), said in why. */
#if defined(__has_include)
#if __has_include(<os/proc.h>) && __has_include(<TargetConditionals.h>)
#include <TargetConditionals.h>
#if TARGET_OS_IPHONE
#include <os/proc.h>
#define WM_HAVE_PROC_AVAILABLE 1
#endif
#endif
#endif

int wm__os_mem_room(wm_os_mem_room *out, wm_os_why *why) {
    wm_os_mem_room r = {UINT64_MAX, UINT64_MAX, 0};
    snprintf(why->source, sizeof why->source, "os_proc_available_memory");
#ifdef WM_HAVE_PROC_AVAILABLE
    r.available = (uint64_t)os_proc_available_memory();
    why->detail = NULL;
#else
    why->detail = "macOS has no os_proc_available_memory: the room is unknown";
#endif
    *out = r;
    return 0;
}

#if defined(__aarch64__) || defined(__arm64__)
int wm__os_cpu_has_asimd(void) { return 1; }
#else
int wm__os_cpu_has_asimd(void) { return 0; }
#endif
