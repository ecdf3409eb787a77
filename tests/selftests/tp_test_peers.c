// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Selftest helpers: ready-made producer/consumer setups (a pair of endpoints in
 * one process, a consumer child, a consumer thread).
 */
#include "tp_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int tpt_pair_open(struct tpt_pair *p, uint64_t len)
{
	return tpt_pair_open_flags(p, len, 0);
}

int tpt_pair_open_flags(struct tpt_pair *p, uint64_t len, uint32_t flags)
{
	int ret;

	memset(p, 0, sizeof(*p));
	p->domain_fd = p->prod = p->cons = -1;
	p->len = len;
	tpt_raise_memlock();

	p->prod = tpt_open();
	if (p->prod < 0)
		return p->prod;
	p->cons = tpt_open();
	if (p->cons < 0)
		return p->cons;
	ret = tpt_get_info(p->prod, &p->info);
	if (ret)
		return ret;
	ret = tpt_domain_create(p->prod, &p->domain_fd, &p->domain_id);
	if (ret)
		return ret;
	ret = tpt_domain_attach_flags(p->prod, p->domain_fd, flags, NULL);
	if (ret)
		return ret;
	ret = tpt_domain_attach_flags(p->cons, p->domain_fd, flags, NULL);
	if (ret)
		return ret;
	p->sbuf = tpt_map(len);
	p->dbuf = tpt_map(len);
	if (!p->sbuf || !p->dbuf)
		return -ENOMEM;
	tpt_fill(p->sbuf, len, TPT_SEED_SRC);
	ret = tpt_register(p->prod, p->sbuf, len, TP_ACCESS_READ, &p->src);
	if (ret)
		return ret;
	return tpt_register(p->cons, p->dbuf, len, TP_ACCESS_WRITE, &p->dst);
}

void tpt_pair_close(struct tpt_pair *p)
{
	if (p->prod >= 0)
		close(p->prod);
	if (p->cons >= 0)
		close(p->cons);
	if (p->domain_fd >= 0)
		close(p->domain_fd);
	tpt_unmap(p->sbuf, p->len);
	tpt_unmap(p->dbuf, p->len);
	p->prod = p->cons = p->domain_fd = -1;
	p->sbuf = p->dbuf = NULL;
}

static void rx_on_sigusr1(int sig)
{
	(void)sig;
}

static void rx_report(int wfd, char tag, const struct tpt_rx_result *res)
{
	tpt_write_all(wfd, &tag, 1);
	tpt_write_all(wfd, res, sizeof(*res));
}

static void rx_child(int wfd, const struct tpt_rx_args *a)
{
	bool donate = a->flags & TP_RECV_DONATE;
	size_t buflen = a->cap ? a->cap : 1;
	struct tpt_rx_result res = { 0 };
	struct tp_recv r;
	uint32_t handle = 0;
	uint8_t *buf = NULL;
	char tag = 'R';
	int fd;

	if (a->interruptible) {
		struct sigaction sa = { .sa_handler = rx_on_sigusr1 };

		sigemptyset(&sa.sa_mask);
		sa.sa_flags = a->sa_restart ? SA_RESTART : 0;
		if (sigaction(SIGUSR1, &sa, NULL)) {
			res.aux = -errno;
			goto fail;
		}
	}
	fd = tpt_open();
	if (fd < 0) {
		res.aux = fd;
		goto fail;
	}
	res.aux = tpt_domain_attach(fd, a->domain_fd, NULL);
	if (res.aux)
		goto fail;
	if (!donate) {
		buf = tpt_map(buflen);
		if (!buf) {
			res.aux = -ENOMEM;
			goto fail;
		}
		res.aux = tpt_register(fd, buf, buflen, TP_ACCESS_WRITE,
				       &handle);
		if (res.aux)
			goto fail;
	}
	if (tpt_write_all(wfd, &tag, 1))
		_exit(1);

	tpt_recv_prep(&r, a->key, a->key_len, handle, 0, a->cap,
		      a->timeout_ns);
	r.flags = a->flags;
	res.ret = tpt_ioctl(fd, TP_IOC_RECV, &r);
	res.len = r.len;
	if (res.ret == 0 && donate && r.len) {
		void *m = tpt_map_region(fd, r.mmap_offset, r.len, PROT_READ);

		if (m)
			res.sum = tpt_sum(m, r.len);
		else
			res.aux = -errno;
	} else if (res.ret == 0 && donate) {
		res.sum = tpt_sum(NULL, 0);
	} else if (res.ret == 0) {
		if (r.len <= a->cap)
			res.sum = tpt_sum(buf, r.len);
		else
			res.aux = -EOVERFLOW;
	}
	tpt_write_all(wfd, &res, sizeof(res));
	_exit(0);
fail:
	rx_report(wfd, 'F', &res);
	_exit(1);
}

int tpt_rx_start(struct tpt_rx *rx, const struct tpt_rx_args *args)
{
	struct tpt_rx_result res;
	int pfd[2], ret;
	char tag;

	rx->pid = -1;
	rx->fd = -1;
	if (pipe2(pfd, O_CLOEXEC))
		return -errno;
	rx->pid = tpt_fork();
	if (rx->pid < 0) {
		ret = -errno;
		close(pfd[0]);
		close(pfd[1]);
		return ret;
	}
	if (rx->pid == 0) {
		close(pfd[0]);
		rx_child(pfd[1], args);
	}
	close(pfd[1]);
	rx->fd = pfd[0];
	ret = tpt_read_all(rx->fd, &tag, 1, TPT_SAFETY_TIMEOUT_MS);
	if (ret == 0 && tag == 'R')
		return 0;
	if (ret == 0 && tpt_read_all(rx->fd, &res, sizeof(res), 1000) == 0)
		ret = res.aux ? res.aux : -EIO;
	else if (ret == 0)
		ret = -EIO;
	tpt_rx_kill(rx);
	return ret;
}

int tpt_rx_ready(struct tpt_rx *rx)
{
	return tpt_readable_now(rx->fd);
}

int tpt_rx_finish(struct tpt_rx *rx, int timeout_ms, struct tpt_rx_result *res)
{
	int ret, status;

	memset(res, 0, sizeof(*res));
	ret = tpt_read_all(rx->fd, res, sizeof(*res), timeout_ms);
	if (ret) {
		tpt_rx_kill(rx);
		return ret;
	}
	close(rx->fd);
	rx->fd = -1;
	ret = tpt_wait_child(rx->pid, 5000, &status);
	rx->pid = -1;
	return ret;
}

void tpt_rx_kill(struct tpt_rx *rx)
{
	if (rx->pid > 0) {
		kill(rx->pid, SIGKILL);
		waitpid(rx->pid, NULL, 0);
	}
	if (rx->fd >= 0)
		close(rx->fd);
	rx->pid = -1;
	rx->fd = -1;
}

static void *thread_recv_main(void *arg)
{
	struct tpt_thread_recv *t = arg;

	t->ret = tpt_ioctl(t->fd, TP_IOC_RECV, &t->req);
	return NULL;
}

int tpt_thread_recv_start(struct tpt_thread_recv *t, int fd, const char *key,
			  uint32_t region, uint64_t cap, uint64_t timeout_ns)
{
	int ret;

	t->fd = fd;
	t->ret = 1;
	tpt_recv_prep(&t->req, key, strlen(key), region, 0, cap, timeout_ns);
	ret = pthread_create(&t->thread, NULL, thread_recv_main, t);
	t->started = ret == 0;
	return -ret;
}

int tpt_thread_recv_join(struct tpt_thread_recv *t, int timeout_ms)
{
	struct timespec ts;
	int ret;

	if (!t->started)
		return -ESRCH;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	ret = pthread_timedjoin_np(t->thread, NULL, &ts);
	if (ret == 0)
		t->started = false;
	return -ret;
}
