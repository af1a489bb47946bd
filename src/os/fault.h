/*
 * fault.h: fault injection for tests (built with WM_FAULT_INJECTION; the test suite always is).
 *
 * Every fallible OS call and every counted allocation asks wm__fault_hit(kind) first. A test
 * arms the table to fail the k-th call of one kind (or of any kind) with a chosen errno, runs a
 * scenario, and reads how many calls were made. The usual sweep:
 *
 *     wm__fault_reset();                      run once, n = wm__fault_count(WM_OS_ANY);
 *     for k in 1..n: wm__fault_arm(WM_OS_ANY, k, EIO); run; check status, ledger 0, no mapping.
 *
 * The table is process-global and thread-safe (atomic counters).
 */
#ifndef WM_FAULT_H
#define WM_FAULT_H

#include "os.h"

/* Clears counters and disarms. */
void wm__fault_reset(void);
/* Fails the k-th call (1-based, counted from now) of `kind` with `err`; with `sticky`, every
 * later call of that kind fails too. */
void wm__fault_arm(wm_os_call kind, uint64_t k, int err);
void wm__fault_arm_sticky(wm_os_call kind, uint64_t k, int err);
/* Calls of `kind` (or all) counted since the last reset. */
uint64_t wm__fault_count(wm_os_call kind);
/* Number of faults injected since the last reset. */
uint64_t wm__fault_injected(void);
const char *wm__fault_call_name(wm_os_call kind);
/* With `on`, wm__os_cached answers "all cached" (after counting its call and asking the table, as
 * always) until it is called again with 0. Fault sweeps pin it: a faulted run that stops half-way
 * leaves part of a file in the page cache, and the next run would otherwise choose other routes
 * (O_DIRECT reopens, more residency checks) and make other calls than the counted run. Tests of
 * the routes themselves (test_cold.c) leave it unpinned and set the page cache up per run. */
void wm__fault_pin_cached(int on);
/* wm__os_mem_room reads `proc_cgroup` instead of /proc/self/cgroup and the tree under
 * `sys_cgroup` instead of /sys/fs/cgroup (NULL, NULL: the real ones again), so that a test can
 * hand it a cgroup of its own making (the strings must outlive the use). */
void wm__fault_cgroup_files(const char *proc_cgroup, const char *sys_cgroup);

#endif /* WM_FAULT_H */
