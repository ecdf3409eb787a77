// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hog.h"
#include "pin.h"

static void burn(void)
{
	volatile uint64_t x = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	pin_release();
	for (;;)
		x++;
}

int hogs_start(struct hogs *h, unsigned int n)
{
	int err;

	h->n = 0;
	if (n > HOG_MAX)
		return -EINVAL;
	while (h->n < n) {
		pid_t pid = fork();

		if (pid == 0)
			burn();
		if (pid < 0) {
			err = -errno;
			hogs_stop(h);
			return err;
		}
		h->pid[h->n++] = pid;
	}
	return 0;
}

void hogs_stop(struct hogs *h)
{
	unsigned int i;

	for (i = 0; i < h->n; i++)
		kill(h->pid[i], SIGKILL);
	for (i = 0; i < h->n; i++)
		waitpid(h->pid[i], NULL, 0);
	h->n = 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Wait until *@w holds @want (a shared futex word). */
static void wait_for(_Atomic uint32_t *w, uint32_t want)
{
	uint32_t v;

	while ((v = atomic_load(w)) != want)
		syscall(SYS_futex, w, FUTEX_WAIT, v, NULL, NULL, 0);
}

static void set_and_wake(_Atomic uint32_t *w, uint32_t v)
{
	atomic_store(w, v);
	syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

double futex_pingpong_us(unsigned int iters, double *p99_us)
{
	_Atomic uint32_t *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				   -1, 0);
	uint64_t *t = calloc(iters ? iters : 1, sizeof(*t)), med;
	unsigned int i;
	pid_t pid;

	if (w == MAP_FAILED || !t) {
		free(t);
		return -ENOMEM;
	}
	atomic_store(&w[0], 0);
	pid = fork();
	if (pid == 0) {
		/* Answer ping i (odd value 2i+1) with pong (even 2i+2). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		pin_child();
		for (i = 0; i < iters; i++) {
			wait_for(&w[0], 2 * i + 1);
			set_and_wake(&w[0], 2 * i + 2);
		}
		_exit(0);
	}
	if (pid < 0) {
		free(t);
		munmap((void *)w, 4096);
		return -errno;
	}
	for (i = 0; i < iters; i++) {
		uint64_t t0 = now_ns();

		set_and_wake(&w[0], 2 * i + 1);
		wait_for(&w[0], 2 * i + 2);
		t[i] = now_ns() - t0;
	}
	waitpid(pid, NULL, 0);
	qsort(t, iters, sizeof(*t), cmp_u64);
	med = t[iters / 2];
	if (p99_us)
		*p99_us = (double)t[(uint64_t)iters * 99 / 100] / 1e3;
	free(t);
	munmap((void *)w, 4096);
	return (double)med / 1e3;
}
