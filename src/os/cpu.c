/*
 * cpu.c: what the CPU can run, as the operating system reports it (os.h). Linux and Android
 * publish the CPU's features in the auxiliary vector (AT_HWCAP); the SIMD kernel files
 * (src/convert/neon.c) ask here instead of reading it themselves.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "os.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
int wm__os_cpu_has_asimd(void) { return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0; }
#else
int wm__os_cpu_has_asimd(void) { return 0; }
#endif
