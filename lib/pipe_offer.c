// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * What a pipe end may use (policy) and what it offers its peer (offer).
 *
 * A domain descriptor names what both ends must share for a transport or
 * channel to work between them; the ends compare them as strings, so
 * each one holds everything that matters and nothing that varies per
 * process:
 *   cma	boot id, pid namespace (pids travel in descriptors), uid;
 *   kmod	boot id, module ABI and the device number of the node (the
 *		same module instance), mount namespace of the node's path;
 *   mtcp	nothing: any two ends that share a tcp transport.
 * Transports describe themselves (xport.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cma_viability.h"
#include "pipe_internal.h"

static const char *const chan_names[PIPE_CHAN_COUNT] = {
	[PIPE_CHAN_BASIC] = "basic",
	[PIPE_CHAN_MTCP] = "mtcp",
	[PIPE_CHAN_CMA] = "cma",
	[PIPE_CHAN_KMOD] = "kmod",
};

static const struct tpu__xport *const xports[] = { &tpu__xport_tcp, &tpu__xport_shm };

const char *tpu__pipe_chan_name(enum pipe_chan c)
{
	return c < PIPE_CHAN_COUNT ? chan_names[c] : "";
}

enum pipe_chan tpu__pipe_chan_parse(const char *name, size_t len)
{
	for (int c = 0; c < PIPE_CHAN_COUNT; c++)
		if (strlen(chan_names[c]) == len && !memcmp(chan_names[c], name, len))
			return (enum pipe_chan)c;
	return PIPE_CHAN_COUNT;
}

const struct tpu__xport *tpu__pipe_xport_by_name(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(xports) / sizeof(xports[0]); i++)
		if (strlen(xports[i]->name) == len && !memcmp(xports[i]->name, name, len))
			return xports[i];
	return NULL;
}

int tpu__pipe_xport_index(const struct tpu__xport *x)
{
	for (size_t i = 0; i < sizeof(xports) / sizeof(xports[0]); i++)
		if (xports[i] == x)
			return (int)i;
	return -1;
}

/*
 * Narrow @ok (one flag per name) to the names of a comma list; NULL or ""
 * leaves it alone.  Unknown names are an error, so a typo is not silently
 * ignored.
 */
static tpu_status narrow(const char *list, bool *ok, size_t n, bool is_xport)
{
	bool keep[PIPE_CHAN_COUNT > 2 ? PIPE_CHAN_COUNT : 2] = { false };
	const char *s = list;

	if (!list || !*list)
		return 0;
	while (*s) {
		size_t len = strcspn(s, ",");
		int idx;

		if (is_xport) {
			const struct tpu__xport *x = tpu__pipe_xport_by_name(s, len);

			idx = x ? tpu__pipe_xport_index(x) : -1;
		} else {
			enum pipe_chan c = tpu__pipe_chan_parse(s, len);

			idx = c == PIPE_CHAN_COUNT ? -1 : (int)c;
		}
		if (idx < 0) {
			tpu__log_debug("pipe: unknown %s '%.*s' in '%s'",
				       is_xport ? "transport" : "channel", (int)len, s, list);
			return -EINVAL;
		}
		keep[idx] = true;
		s += len;
		if (*s == ',')
			s++;
	}
	for (size_t i = 0; i < n; i++)
		ok[i] = ok[i] && keep[i];
	return 0;
}

tpu_status tpu__pipe_policy_check(const char *transports, const char *channels)
{
	struct tpu__pipe_policy pol = { { true, true }, { true, true, true, true }, 0 };
	tpu_status st = narrow(transports, pol.xport_ok, 2, true);

	return st ? st : narrow(channels, pol.chan_ok, PIPE_CHAN_COUNT, false);
}

tpu_status tpu__pipe_policy(struct tpu_context *ctx, struct tpu__pipe_policy *out)
{
	tpu_status st;

	*out = (struct tpu__pipe_policy){ { true, true }, { true, true, true, true }, 0 };
	st = tpu__mtcp_lanes_policy(&out->mtcp_lanes);
	if (!st)
		st = narrow(tpu__ctx_transports(ctx), out->xport_ok, 2, true);
	if (!st)
		st = narrow(getenv("TPU_TRANSPORTS"), out->xport_ok, 2, true);
	if (!st)
		st = narrow(tpu__ctx_channels(ctx), out->chan_ok, PIPE_CHAN_COUNT, false);
	if (!st)
		st = narrow(getenv("TPU_CHANNELS"), out->chan_ok, PIPE_CHAN_COUNT, false);
	if (tpu__ctx_flags(ctx) & TPU_CTX_NO_KMOD)
		out->chan_ok[PIPE_CHAN_KMOD] = false;
	/* Frames need no channel: basic stays, whatever the lists say. */
	out->chan_ok[PIPE_CHAN_BASIC] = true;
	return st;
}

static tpu_status cma_domain(char *buf, size_t size)
{
	char boot[64], why[160];
	tpu_status st = tpu__cma_viable(why, sizeof(why));

	if (st) {
		tpu__log_debug("pipe: no cma channel: %s", why);
		return st;
	}
	st = tpu__boot_id(boot, sizeof(boot));
	if (st)
		return st;
	snprintf(buf, size, "cma:%s:%llu:%u", boot, (unsigned long long)tpu__cma_pid_ns(),
		 (unsigned int)geteuid());
	return 0;
}

static tpu_status kmod_domain(struct tpu_context *ctx, char *buf, size_t size)
{
	struct tpu_endpoint *ep = tpu__ctx_endpoint(ctx);
	const char *dev = tpu__ctx_dev_path(ctx) ? tpu__ctx_dev_path(ctx) : TPU_DEVICE_PATH;
	struct tpu_info info;
	char boot[64];
	struct stat sb;
	tpu_status st;

	if (!ep)
		return TPU_E_NO_DEVICE;
	st = tpu_endpoint_info(ep, &info);
	if (!st && !(info.features & TPU_FEAT_URING_CMD))
		st = -EOPNOTSUPP;
	if (!st && fstat(tpu_endpoint_fd(ep), &sb))
		st = tpu__errno();
	if (!st)
		st = tpu__boot_id(boot, sizeof(boot));
	if (st)
		return st;
	snprintf(buf, size, "kmod:%s:%u:%llx:%lu:%s", boot, info.abi_version,
		 (unsigned long long)sb.st_rdev, tpu__ns_inode("mnt"), dev);
	return 0;
}

tpu_status tpu__pipe_offer(struct tpu_context *ctx, const struct tpu__pipe_policy *pol,
			   struct tpu__pipe_offer *out)
{
	tpu_status st;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < sizeof(xports) / sizeof(xports[0]); i++) {
		if (!pol->xport_ok[i])
			continue;
		st = xports[i]->domain_descriptor(out->xports[out->nxports].domain,
						  sizeof(out->xports[0].domain));
		if (st)
			continue;
		out->xports[out->nxports++].xport = xports[i];
	}
	for (int c = PIPE_CHAN_COUNT - 1; c >= 0; c--) {
		char *d = out->chans[out->nchans].domain;
		size_t size = sizeof(out->chans[0].domain);

		if (!pol->chan_ok[c])
			continue;
		if (c == PIPE_CHAN_KMOD)
			st = kmod_domain(ctx, d, size);
		else if (c == PIPE_CHAN_CMA)
			st = cma_domain(d, size);
		else
			st = snprintf(d, size, "%s", chan_names[c]) < 0 ? -EIO : 0;
		if (st) {
			tpu__log_debug("pipe: channel %s not offered: %s", chan_names[c],
				       tpu_strerror(st));
			continue;
		}
		out->chans[out->nchans++].chan = (enum pipe_chan)c;
	}
	return 0;
}
