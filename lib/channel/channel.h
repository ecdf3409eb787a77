/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * lib/channel: how a pipe moves a tensor too big to go inline.  One file
 * per channel, each defining one struct tpu__chan; channels.c lists them.
 * Adding a channel is that file and its entry in channels.c's table (its
 * name also joins lib/Makefile's channel list and the file lists that
 * scripts/check-layers.py checks).  Built on lib/transport and lib/rdv; the pipe
 * above owns the bookkeeping and hands it down as function pointers in
 * struct tpu__chan_xfer.  Context thread only.  Not installed.
 *
 *   basic	inline in the pipe's own stream (always there)
 *   mtcp	striped over extra tcp connections (lanes) beside a tcp pipe
 *   cma	the reader pulls with process_vm_readv and ACKs the tensor
 *   kmod	a kmod rendezvous shared by the two ends (its domain
 *		descriptor passed over the transport at set-up)
 *   rdma	beside the rdma transport: the reader pulls with RDMA READs
 *		from the writer's registered memory and ACKs the tensor
 *   cuda_staged  CUDA memory on either side: inline in the pipe's stream,
 *		staged through page-locked host memory by the pipe
 *   cuda_ipc	CUDA memory at the writer, one host: the reader copies from
 *		it through a CUDA IPC handle (or a VMM allocation's
 *		descriptor) and ACKs the tensor
 *   cuda_dmabuf  CUDA memory on either side, one host, beside kmod: the
 *		device memory goes to the module as an imported dma-buf and
 *		the module copies, over the kmod channel's rendezvous
 */
#ifndef TPU_CHANNEL_H
#define TPU_CHANNEL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/cuda.h"
#include "rdv/rdv.h"
#include "transport/xport.h"

/* Descriptor fields: @n bytes of @v, little-endian, whatever the host's order. */
static inline void tpu__chan_put_le(uint8_t *d, uint64_t v, int n)
{
	for (int b = 0; b < n; b++)
		d[b] = (uint8_t)(v >> (8 * b));
}

static inline uint64_t tpu__chan_get_le(const uint8_t *d, int n)
{
	uint64_t v = 0;

	for (int b = 0; b < n; b++)
		v |= (uint64_t)d[b] << (8 * b);
	return v;
}

/* Most channels in the table; most lanes a pipe may have. */
#define TPU__CHAN_MAX		8
#define TPU__CHAN_LANES_MAX	16

/*
 * What the channels of one pipe share; the pipe embeds it and fills it in
 * during set-up.
 */
struct tpu__chan_link {
	struct tpu_context *ctx;
	struct tpu__conn *conn;		/* the pipe's own connection */
	bool connector;			/* this end connected */
	bool closed;			/* the channel's ->close ran */
	/* The chosen channel's own state (kmod: its rendezvous); NULL once closed. */
	void *state;
	int fd;				/* a descriptor received at set-up, -1 if none */
	tpu__io_cb setup_done;		/* ->setup's callback while it runs */
	void *setup_arg;
	/*
	 * Extra connections to the peer (channels with TPU__CHAN_LANES), set
	 * up by the pipe: lanes[0..nlanes).  Each end picks them round-robin
	 * in message and tensor order, the writer with tx, the reader with rx.
	 */
	struct tpu__conn *lanes[TPU__CHAN_LANES_MAX];
	unsigned int nlanes;
	unsigned int tx, rx;
};

/* What a part of a tensor's transfer is, for the pipe's bookkeeping. */
enum tpu__chan_part {
	TPU__PART_IO,		/* a transport operation (on the connection or a lane) */
	TPU__PART_CHAN,		/* a channel operation (a rendezvous SEND or RECV) */
	TPU__PART_ACK,		/* writer: until the reader's ACK (TPU__CHAN_ACKED) */
};

/*
 * One tensor of one message, as the pipe hands it to its channel.  The
 * channel may copy it (by value) to keep it across its callbacks.
 */
struct tpu__chan_xfer {
	struct tpu__chan_link *link;
	struct tpu_message_tensor *t;	/* the user's tensor (reader: where it goes) */
	uint64_t seq;			/* the message's sequence number */
	uint32_t idx;			/* the tensor's index in it */
	const uint8_t *desc;		/* reader: the writer's desc_len bytes */
	void *owner;			/* the pipe's write or read */
	/*
	 * The pipe's, called by the channel: a part starts (before its
	 * operation is queued), a part ends (once, with its status; an IO part
	 * that fails fails the pipe).  A part that could not be queued is
	 * ended with part_cancel instead, which calls nothing back.
	 */
	void (*part_start)(struct tpu__chan_xfer *x, enum tpu__chan_part kind);
	void (*part_done)(struct tpu__chan_xfer *x, enum tpu__chan_part kind, tpu_status st);
	void (*part_cancel)(struct tpu__chan_xfer *x, enum tpu__chan_part kind);
	/* Reader of a TPU__CHAN_ACKED channel: tell the writer, as an IO part. */
	tpu_status (*ack)(struct tpu__chan_xfer *x, tpu_status st);
	bool given;			/* writer, out: the channel took t->buffer (TPU_TENSOR_GIVE) */
};

/* struct tpu__chan.flags */
#define TPU__CHAN_INLINE	0x1	/* tensors go inline in the pipe's stream (basic) */
#define TPU__CHAN_ACKED		0x2	/* the reader ACKs each tensor; the writer waits */
#define TPU__CHAN_LANES		0x4	/* needs lanes (the listener asks for them) */
#define TPU__CHAN_MODULE	0x8	/* uses /dev/tensorpipe (off with TPU_CTX_NO_KMOD) */
#define TPU__CHAN_BUFFERS	0x10	/* its recv makes TPU_TENSOR_WANT_BUFFER buffers itself */
/*
 * Tensors go inline in the pipe's stream like basic's, but the side whose
 * tensor is CUDA memory stages it through page-locked host memory
 * (cuda_staged); no send or recv.
 */
#define TPU__CHAN_STAGED	0x20
/*
 * Rides the kmod channel's rendezvous (link->state): chosen for a device
 * pair only when kmod carries the pipe's CPU tensors (cuda_dmabuf).
 */
#define TPU__CHAN_ON_KMOD	0x40

struct tpu__chan {
	const char *name;		/* HELLO/WELCOME, TPU_CHANNELS, tpu_pipe_channel() */
	uint32_t wire_id;		/* a tensor's channel in a MSG frame; never reused */
	unsigned int flags;		/* TPU__CHAN_* */
	uint32_t desc_len;		/* bytes of per-tensor descriptor in a MSG frame */
	/*
	 * Viability: 0 and a NUL-terminated compatibility descriptor in @buf
	 * when this context can use the channel (two ends can use it together
	 * iff their descriptors are equal), else why not.
	 */
	tpu_status (*descriptor)(struct tpu_context *ctx, char *buf, size_t size);
	/* Whether it can go beside transport @x from @src to @dst memory. */
	bool (*supports)(const struct tpu__xport *x, enum tpu_device_type src,
			 enum tpu_device_type dst);
	/*
	 * Optional: set up once chosen, on link->conn (both ends).  0 and
	 * done(arg, status) exactly once later, or an error and no call.
	 */
	tpu_status (*setup)(struct tpu__chan_link *l, tpu__io_cb done, void *arg);
	/* Writer: the tensor's descriptor, desc_len bytes, into @desc. */
	void (*describe)(const struct tpu__chan_xfer *x, uint8_t *desc);
	/*
	 * Start moving one tensor; never block.  Every part started before an
	 * error return stays the pipe's to wait for.
	 */
	tpu_status (*send)(struct tpu__chan_link *l, struct tpu__chan_xfer *x);
	tpu_status (*recv)(struct tpu__chan_link *l, struct tpu__chan_xfer *x);
	/*
	 * Optional, writer of a TPU__CHAN_ACKED channel: the reader ACKed
	 * tensor @idx of message @seq (called before the ACK part ends), so
	 * that what describe set up for it (a registration) can go.
	 */
	void (*acked)(struct tpu__chan_link *l, uint64_t seq, uint32_t idx);
	/*
	 * Optional: the pipe failed or closed; pending parts end with an
	 * error.  Called for the CPU channel and for each device-pair
	 * channel (once per pair it serves: it must be idempotent).
	 */
	void (*close)(struct tpu__chan_link *l);
};

/*
 * The fallback every pipe starts with, and kmod, which TPU__CHAN_ON_KMOD
 * channels ride; the other channels are named only in channels.c.
 */
extern const struct tpu__chan tpu__chan_basic;
extern const struct tpu__chan tpu__chan_kmod;
/* Whether device-pair channel @dev can go on a pipe whose CPU channel is @cpu. */
bool tpu__chan_beside(const struct tpu__chan *cpu, const struct tpu__chan *dev);
/*
 * chan_kmod.c, for TPU__CHAN_ON_KMOD channels: post tensor @x from @src
 * (SEND flags @flags), or take it into @dst (NULL: a received buffer, as
 * for TPU_TENSOR_WANT_BUFFER), on the kmod rendezvous; @hold (may be
 * NULL) is freed when the part ends, and stays the caller's on an error
 * return.
 */
tpu_status tpu__chan_kmod_post(struct tpu__chan_link *l, struct tpu__chan_xfer *x,
				const struct tpu_tensor *src, unsigned int flags,
				struct tpu_buffer *hold);
tpu_status tpu__chan_kmod_take(struct tpu__chan_link *l, struct tpu__chan_xfer *x,
				const struct tpu_tensor *dst, struct tpu_buffer *hold);

/* The channels, worst first (an offer lists them best first); [0] is basic. */
extern const struct tpu__chan *const tpu__chans[];
extern const unsigned int tpu__nchans;
/*
 * chan_rdma.c's writer: registrations made (ibv_reg_mr) and taken from its
 * tpu_buffer cache, since the process started; for the tests.
 */
extern atomic_ulong tpu__chan_rdma_regs, tpu__chan_rdma_cache_hits;
/* NULL if unknown. */
const struct tpu__chan *tpu__chan_by_name(const char *name, size_t len);
/* Position in tpu__chans, -1 if not there. */
int tpu__chan_index(const struct tpu__chan *c);

/* mtcp: tensors smaller than this many bytes per lane use fewer lanes. */
#define PIPE_MTCP_CHUNK_MIN	(256u << 10)
/* How many lanes a tensor of @len bytes goes over (1..nlanes). */
unsigned int tpu__mtcp_stripes(uint64_t len, unsigned int nlanes);
/* Stripe @i of @k of a tensor of @len bytes: [*off, *off + *n). */
void tpu__mtcp_stripe(uint64_t len, unsigned int k, unsigned int i, uint64_t *off, uint64_t *n);

#endif /* TPU_CHANNEL_H */
