// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Asynchronous events of the RDMA devices (QP fatal, port down, device
 * fatal) for the rdma transport.  rdma_cm opens each device once per
 * process, so its async descriptor is shared by every connection on it,
 * whatever context they belong to.  Every open connection watches that
 * descriptor (non-blocking); whichever thread finds it readable reads the
 * events under the list's lock and marks the connections they concern
 * (async_err), waking their contexts: the connection's poller then fails
 * it on its own thread.  The lock also keeps a connection from being freed
 * while it is being marked.
 */
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "rdma.h"

static pthread_mutex_t async_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdma_conn *async_list;

void tpu__rdma_async_add(struct rdma_conn *c)
{
	int fd = c->id->verbs->async_fd;
	int fl = fcntl(fd, F_GETFL);

	/* Whoever reads, reads what is there and goes back to its loop. */
	if (fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	pthread_mutex_lock(&async_lock);
	c->async_next = async_list;
	async_list = c;
	c->async_listed = true;
	pthread_mutex_unlock(&async_lock);
}

void tpu__rdma_async_del(struct rdma_conn *c)
{
	struct rdma_conn **pp;

	if (!c->async_listed)
		return;
	pthread_mutex_lock(&async_lock);
	for (pp = &async_list; *pp; pp = &(*pp)->async_next) {
		if (*pp == c) {
			*pp = c->async_next;
			break;
		}
	}
	c->async_listed = false;
	pthread_mutex_unlock(&async_lock);
}

/* Does event @e of device @v concern connection @c? */
static bool concerns(const struct rdma_conn *c, const struct ibv_context *v,
		     const struct ibv_async_event *e)
{
	if (c->id->verbs != v)
		return false;
	switch (e->event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		return e->element.qp == c->id->qp;
	case IBV_EVENT_CQ_ERR:
		return e->element.cq == c->cq;
	case IBV_EVENT_PORT_ERR:
		return e->element.port_num == c->id->port_num;
	case IBV_EVENT_DEVICE_FATAL:
		return true;
	default:
		return false;
	}
}

void tpu__rdma_async_read(struct rdma_conn *c)
{
	struct ibv_context *v = c->id->verbs;
	struct ibv_async_event e;

	pthread_mutex_lock(&async_lock);
	while (!ibv_get_async_event(v, &e)) {
		tpu__log_debug("rdma: %s: %s", ibv_get_device_name(v->device),
			       ibv_event_type_str(e.event_type));
		for (struct rdma_conn *o = async_list; o; o = o->async_next) {
			if (!concerns(o, v, &e))
				continue;
			atomic_store_explicit(&o->async_err, 1, memory_order_release);
			/* Its thread may be asleep: its poller looks at async_err. */
			if (o->ctx != c->ctx) {
				uint64_t one = 1;
				ssize_t n = write(tpu__ctx_wake_fd(o->ctx), &one, sizeof(one));

				(void)n;
			}
		}
		ibv_ack_async_event(&e);
	}
	pthread_mutex_unlock(&async_lock);
}
