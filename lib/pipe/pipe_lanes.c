// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The lanes of a pipe (context thread only): extra tcp connections between
 * the two ends of a pipe whose transport is tcp, for a channel that asks
 * for them (TPU__CHAN_LANES: mtcp, which stripes tensors over them, see
 * channel/chan_mtcp.c).
 *
 * Set-up: the listener asks for lanes in WELCOME (TPU_MTCP_LANES of its
 * side) with a token; the connector opens them to the address it connected
 * to and sends JOIN (token, lane 1..n) first on each; the listener hands
 * the pipe to the user once every lane joined.  The frames stay on the
 * pipe's own connection.  With a job secret each lane proves it first
 * (pipe_auth.c), and JOIN follows the proof.
 */
#include <stdlib.h>
#include <string.h>

#include "pipe_internal.h"

tpu_status tpu__mtcp_lanes_policy(unsigned int *lanes)
{
	const char *e = getenv("TPU_MTCP_LANES");
	unsigned long v;
	char *end;

	*lanes = PIPE_MTCP_LANES_DEFAULT;
	if (!e || !*e)
		return 0;
	v = strtoul(e, &end, 10);
	if (*end || e[0] < '0' || e[0] > '9' || v < 1 || v > TPU__WIRE_LANES_MAX) {
		tpu__log_debug("pipe: TPU_MTCP_LANES='%s' is not 1..%u", e, TPU__WIRE_LANES_MAX);
		return -EINVAL;
	}
	*lanes = (unsigned int)v;
	return 0;
}

static void lane_join_written(void *arg, tpu_status st)
{
	struct tpu_pipe *p = arg;

	if (st)
		tpu__pipe_fail(p, st);
	tpu__pipe_io_put(p);
}

static tpu_status lane_join(struct tpu_pipe *p, unsigned int i)
{
	long len = tpu__wire_join_encode(NULL, 0, &(struct tpu__wire_join){ 0, 1 });
	uint8_t *frame = p->lane_frames + (size_t)len * i;
	tpu_status st;

	tpu__pipe_io_get(p);
	st = p->link.lanes[i]->ops->write(p->link.lanes[i], &(struct iovec){ frame, (size_t)len }, 1,
					  lane_join_written, p);
	if (st)
		tpu__pipe_io_cancel(p);
	return st;
}

static void lane_authed(struct tpu_pipe *p, struct tpu__conn *c, tpu_status st, void *arg)
{
	unsigned int i = (unsigned int)(uintptr_t)arg;

	if (p->state == PIPE_FAILED)
		return;
	if (!st && (i >= p->link.nlanes || p->link.lanes[i] != c))
		st = -EPROTO;
	if (!st)
		st = lane_join(p, i);
	if (st)
		tpu__pipe_fail(p, st);
	else
		tpu__pipe_connector_step_done(p);
}

tpu_status tpu__mtcp_connect(struct tpu_pipe *p, const char *addr, uint64_t token, unsigned int n)
{
	long len = tpu__wire_join_encode(NULL, 0, &(struct tpu__wire_join){ token, 1 });
	tpu_status st;

	if (len < 0)
		return (tpu_status)len;
	free(p->lane_frames);
	p->lane_frames = malloc((size_t)len * n);
	if (!p->lane_frames)
		return -ENOMEM;
	for (unsigned int i = 0; i < n; i++) {
		uint8_t *frame = p->lane_frames + (size_t)len * i;

		tpu__wire_join_encode(frame, (size_t)len, &(struct tpu__wire_join){ token, i + 1 });
		st = tpu__xport_tcp.connect(p->ctx, addr, &p->link.lanes[i]);
		if (st)
			return st;
		p->link.nlanes = i + 1;
		if (p->secret.set) {
			p->auth_pending++;
			st = tpu__pipe_auth(p, p->link.lanes[i], true, lane_authed, (void *)(uintptr_t)i);
			if (st)
				p->auth_pending--;
		} else {
			st = lane_join(p, i);
		}
		if (st)
			return st;
	}
	tpu__log_debug("pipe %p: %u mtcp lanes to %s", (void *)p, n, addr);
	return 0;
}

tpu_status tpu__mtcp_lane_joined(struct tpu_pipe *p, uint32_t lane, struct tpu__conn *conn)
{
	if (!lane || lane > p->link.nlanes || p->link.lanes[lane - 1] || conn->xport != &tpu__xport_tcp)
		return -EPROTO;
	p->link.lanes[lane - 1] = conn;
	p->lanes_joined++;
	return 0;
}

void tpu__mtcp_close(struct tpu_pipe *p)
{
	for (unsigned int i = 0; i < TPU__CHAN_LANES_MAX; i++) {
		struct tpu__conn *c = p->link.lanes[i];

		p->link.lanes[i] = NULL;
		if (c)
			c->ops->close(c);
	}
}
