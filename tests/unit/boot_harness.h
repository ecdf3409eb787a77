/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * What the bootstrap tests share (boot_harness.c): the launcher variables
 * set and cleared as torchrun or mpirun would, a free loopback port, and
 * ranks run as fork()ed processes whose exit status is their verdict.
 */
#ifndef UNIT_BOOT_HARNESS_H
#define UNIT_BOOT_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Unset every variable tpu_world_info_from_env() reads. */
void boot_env_clear(void);
/* Set "NAME=VALUE" strings, up to a NULL. */
void boot_env_set(const char *const *vars);
/* A port on 127.0.0.1 that nothing listens on just now. */
uint16_t boot_free_port(void);
/* True if nothing listens on 127.0.0.1:@port just now. */
bool boot_port_is_free(uint16_t port);
uint64_t boot_now_ms(void);

/*
 * Fork @n ranks running fn(rank, n, arg) (its return: 0 passed, else the
 * failing line); each is killed after @limit_s seconds.  True when all
 * passed; a failing rank's status goes to the TAP diagnostics.
 */
bool boot_run_ranks(int n, int (*fn)(int rank, int n, void *arg), void *arg, unsigned int limit_s);

/* In a rank: on failure, return the line (and say it on stderr). */
#define R_CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "# rank: %s:%d: %s failed\n", __FILE__, __LINE__, #cond); \
		return __LINE__ % 250 + 1; \
	} \
} while (0)

#endif
