/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The front end's per-key FIFOs (rdv_queue.c).  Every op is in the FIFO of
 * its key and kind until its callback has been called; receives are called
 * back in issue order, and a RECV is handed to the implementation only when
 * it is the oldest unfinished RECV of its key, so that the first receive
 * issued gets the first tensor.  All of it
 * under tpu_rendezvous.lock.
 */
#ifndef TPU_RDV_QUEUE_H
#define TPU_RDV_QUEUE_H

#include "rdv.h"

struct tpu__fifo {
	struct tpu__op *head, *tail;
};

#define TPU__KEYQ_IMPL_PTRS	3

struct tpu__keyq {
	struct tpu__keyq *next;		/* hash chain, or the free list */
	size_t key_cap;			/* room for a key of this many bytes */
	uint64_t hash;
	struct tpu__fifo sends;
	struct tpu__fifo recvs;
	/*
	 * The implementation's state for this key (inprocess keeps its send,
	 * receive and timer here: a table of its own was two more cache
	 * lines per op), zeroed when the FIFO is made.  It must hold
	 * nothing once the key's ops are all done: the FIFO then goes.
	 */
	void *impl[TPU__KEYQ_IMPL_PTRS];
	size_t key_len;
	uint8_t key[];
};

/* The FIFO of @key, created if @create; NULL if absent or out of memory. */
struct tpu__keyq *tpu__keyq_find(struct tpu_rendezvous *rdv, const uint8_t *key, size_t key_len,
				 bool create);
/* tpu__keyq_find() for a key whose tpu__rdv_key_hash() is @hash. */
struct tpu__keyq *tpu__keyq_find_hashed(struct tpu_rendezvous *rdv, const uint8_t *key,
					size_t key_len, uint64_t hash, bool create);
/* Append @op (its keyq set) to the FIFO of its kind. */
void tpu__keyq_append(struct tpu__keyq *kq, struct tpu__op *op);
/* Take back an op that could not start; frees the keyq when it empties. */
void tpu__keyq_remove(struct tpu_rendezvous *rdv, struct tpu__op *op);
/* True when an older RECV of the key is started and unfinished. */
bool tpu__keyq_recv_busy(const struct tpu__keyq *kq, const struct tpu__op *op);
/*
 * Complete, with @status, every queued (not started) RECV of @kq, or of
 * every key when @kq is NULL.  Returns how many.
 */
size_t tpu__keyq_fail_queued(struct tpu_rendezvous *rdv, struct tpu__keyq *kq, tpu_status status);
/* With TPU_LOG=debug, log that a receive of @key timed out and what is pending. */
void tpu__rdv_log_timeout(struct tpu_rendezvous *rdv, const void *key, size_t key_len);
/* With TPU_LOG=debug, log every key with pending ops; caller holds rdv->lock. */
void tpu__keyq_log_pending(struct tpu_rendezvous *rdv, const char *why);
/* Free the hash table (all FIFOs empty). */
void tpu__keyq_free_all(struct tpu_rendezvous *rdv);

/* Free an op outright (its key buffer too). */
void tpu__op_free(struct tpu__op *op);
/*
 * With rdv->lock held: an op whose key buffer holds @key_len bytes, from
 * the free list when one fits (its other fields are stale: the caller sets
 * them all), else a new one; NULL without memory.  tpu__op_recycle() puts
 * a finished op back (or frees it when the list is full).
 */
struct tpu__op *tpu__op_get(struct tpu_rendezvous *rdv, size_t key_len);
void tpu__op_recycle(struct tpu_rendezvous *rdv, struct tpu__op *op);
/* Set up the free lists of finished ops and emptied key FIFOs (rdv_new). */
void tpu__rdv_free_lists_init(struct tpu_rendezvous *rdv);

/* Choose and start the implementation of a new or joined rendezvous (rdv_select.c). */
tpu_status tpu__rdv_select(struct tpu_rendezvous *rdv, enum tpu_rdv_impl impl);
tpu_status tpu__rdv_select_join(struct tpu_rendezvous *rdv, int fd);
/* Free what is left of a rendezvous struct (its lock, its table). */
void tpu__rdv_free(struct tpu_rendezvous *rdv);

#endif
