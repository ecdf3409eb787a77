// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Which process an object belongs to.  fork() copies every object into the
 * child, but not the threads that drive them, nor the right to act for the
 * parent on state both share (sockets, the module, the store): an object
 * records the generation it was made in, and every child fork() makes sees
 * a newer one, so that its public calls refuse with TPU_E_FORKED.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "base.h"

static atomic_uint fork_gen;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
	atomic_fetch_add(&fork_gen, 1);
}

static void fork_hook(void)
{
	pthread_atfork(NULL, NULL, fork_child);
}

unsigned int tpu__fork_gen(void)
{
	pthread_once(&fork_once, fork_hook);
	return atomic_load(&fork_gen);
}

bool tpu__forked_since(unsigned int gen)
{
	return atomic_load(&fork_gen) != gen;
}
