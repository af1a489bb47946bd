/*
 * fault.c: the fault-injection table behind fault.h. Compiled only with WM_FAULT_INJECTION.
 *
 * Counting and arming are atomic so that worker threads of a load can hit the table; the k-th
 * call is decided by a single fetch-add, so exactly one call fails per arming (or every call
 * from the k-th on, when sticky).
 */
#include "fault.h"

#include <stdatomic.h>

#ifdef WM_FAULT_INJECTION

static _Atomic uint64_t counts[WM_OS_CALL_COUNT + 1];
static _Atomic int armed_kind = -1;
static _Atomic uint64_t armed_k;
static _Atomic int armed_err;
static _Atomic int armed_sticky;
static _Atomic uint64_t injected;
static _Atomic int cached_pinned;
static const char *_Atomic cgroup_files[2]; /* wm__fault_cgroup_files: NULL, the real ones */

void wm__fault_reset(void) {
    atomic_store(&armed_kind, -1);
    for (int i = 0; i <= WM_OS_CALL_COUNT; i++)
        atomic_store(&counts[i], 0);
    atomic_store(&injected, 0);
}

static void arm(wm_os_call kind, uint64_t k, int err, int sticky) {
    wm__fault_reset();
    atomic_store(&armed_k, k);
    atomic_store(&armed_err, err);
    atomic_store(&armed_sticky, sticky);
    atomic_store(&armed_kind, (int)kind);
}

void wm__fault_arm(wm_os_call kind, uint64_t k, int err) { arm(kind, k, err, 0); }
void wm__fault_arm_sticky(wm_os_call kind, uint64_t k, int err) { arm(kind, k, err, 1); }

uint64_t wm__fault_count(wm_os_call kind) { return atomic_load(&counts[kind]); }
uint64_t wm__fault_injected(void) { return atomic_load(&injected); }
void wm__fault_pin_cached(int on) { atomic_store(&cached_pinned, on != 0); }
int wm__fault_cached_pinned(void) { return atomic_load(&cached_pinned); }

void wm__fault_cgroup_files(const char *proc_cgroup, const char *sys_cgroup) {
    atomic_store(&cgroup_files[0], proc_cgroup);
    atomic_store(&cgroup_files[1], sys_cgroup);
}

const char *wm__fault_cgroup_file(int which, const char *real) {
    const char *p = atomic_load(&cgroup_files[which != 0]);
    return p ? p : real;
}

int wm__fault_hit(wm_os_call call) {
    uint64_t n_kind = atomic_fetch_add(&counts[call], 1) + 1;
    uint64_t n_any = atomic_fetch_add(&counts[WM_OS_ANY], 1) + 1;
    int kind = atomic_load(&armed_kind);
    if (kind < 0) return 0;
    uint64_t n = kind == (int)WM_OS_ANY ? n_any : (kind == (int)call ? n_kind : 0);
    if (n == 0) return 0;
    uint64_t k = atomic_load(&armed_k);
    if (n == k || (n > k && atomic_load(&armed_sticky))) {
        atomic_fetch_add(&injected, 1);
        return atomic_load(&armed_err);
    }
    return 0;
}

#else

void wm__fault_reset(void) {}
void wm__fault_arm(wm_os_call kind, uint64_t k, int err) {
    (void)kind;
    (void)k;
    (void)err;
}
void wm__fault_arm_sticky(wm_os_call kind, uint64_t k, int err) {
    (void)kind;
    (void)k;
    (void)err;
}
uint64_t wm__fault_count(wm_os_call kind) {
    (void)kind;
    return 0;
}
uint64_t wm__fault_injected(void) { return 0; }
void wm__fault_pin_cached(int on) { (void)on; }
void wm__fault_cgroup_files(const char *proc_cgroup, const char *sys_cgroup) {
    (void)proc_cgroup;
    (void)sys_cgroup;
}

#endif

const char *wm__fault_call_name(wm_os_call kind) {
    static const char *const names[] = {
#define WM__OS_CALL_NAME(name) #name,
        WM_OS_CALL_LIST(WM__OS_CALL_NAME)
#undef WM__OS_CALL_NAME
            "ANY"};
    return (unsigned)kind <= WM_OS_CALL_COUNT ? names[kind] : "?";
}
