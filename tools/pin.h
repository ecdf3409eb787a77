/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Where the two sides of a two-process measurement run (tpbench --pin).
 *
 * A hand-off between processes on one CPU costs a context switch; between
 * two CPUs it costs a wake-up of the other CPU, which on a virtual machine
 * whose idle vCPUs halt can take tens of microseconds.  Left to the
 * scheduler, two benchmarks of one run may be placed differently, and
 * their ratio then compares placements, not code.  Pinned, every side of
 * every measurement of the run is placed alike:
 *
 *   same   this process and every process it forks on its first usable CPU
 *   split  this process on its first usable CPU, the measuring peer it
 *          forks (pin_child()) on its second
 *
 * Threads the library starts inherit their creator's CPU.  Busy processes
 * (--hog) are released to every CPU the run started with (pin_release()).
 */
#ifndef TOOLS_PIN_H
#define TOOLS_PIN_H

#include <stddef.h>

/*
 * Pin this process as @how says ("same" or "split").  -EINVAL for another
 * word, -ENODEV for "split" with fewer than two usable CPUs, -errno when
 * the kernel refuses.
 */
int pin_setup(const char *how);
/* In a forked peer that measures with this process: its place. */
void pin_child(void);
/* In a forked busy process: every CPU the run started with. */
void pin_release(void);
/* One line saying where the sides ran, for the report. */
const char *pin_describe(void);

#endif
