// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "pin.h"

static enum { PIN_NONE, PIN_SAME, PIN_SPLIT } mode;
static cpu_set_t started;	/* the CPUs this run could use before pinning */
static int cpu[2] = { -1, -1 };	/* this process's CPU, the peer's */

static int pin_to(int c)
{
	cpu_set_t one;

	CPU_ZERO(&one);
	CPU_SET(c, &one);
	return sched_setaffinity(0, sizeof(one), &one) ? -errno : 0;
}

int pin_setup(const char *how)
{
	int c, found = 0;

	if (strcmp(how, "same") && strcmp(how, "split"))
		return -EINVAL;
	if (sched_getaffinity(0, sizeof(started), &started))
		return -errno;
	for (c = 0; c < CPU_SETSIZE && found < 2; c++)
		if (CPU_ISSET(c, &started))
			cpu[found++] = c;
	if (!strcmp(how, "split") && found < 2)
		return -ENODEV;
	mode = !strcmp(how, "same") ? PIN_SAME : PIN_SPLIT;
	if (mode == PIN_SAME)
		cpu[1] = cpu[0];
	return pin_to(cpu[0]);
}

void pin_child(void)
{
	int err = mode == PIN_SPLIT ? pin_to(cpu[1]) : 0;

	/* The child stays where it was; the report says so only on stderr. */
	if (err)
		fprintf(stderr, "tpbench: cannot pin the peer to CPU %d: %s\n", cpu[1],
			strerror(-err));
}

void pin_release(void)
{
	if (mode != PIN_NONE)
		sched_setaffinity(0, sizeof(started), &started);
}

const char *pin_describe(void)
{
	static char line[96];

	if (mode == PIN_NONE)
		return "placement: not pinned (--pin same|split): the scheduler placed each side";
	snprintf(line, sizeof(line),
		 "placement: --pin %s: this process on CPU %d, its peers on CPU %d",
		 mode == PIN_SAME ? "same" : "split", cpu[0], cpu[1]);
	return line;
}
