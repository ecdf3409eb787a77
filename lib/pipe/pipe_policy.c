// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * What a pipe end may use (policy) and what it offers its peer (offer),
 * and the public tpu_context_create(), which checks the option lists.
 *
 * A compatibility descriptor names what both ends must share for a
 * transport or channel to work between them; the ends compare them as
 * strings, so each one holds everything that matters and nothing that
 * varies per process.  Transports (xport.h) and channels (channel.h)
 * describe themselves.
 */
#include <stdlib.h>
#include <string.h>

#include "pipe_internal.h"

static const struct tpu__xport *const xports[] = {
	&tpu__xport_tcp, &tpu__xport_shm, &tpu__xport_rdma,
};

_Static_assert(sizeof(xports) / sizeof(xports[0]) == TPU__PIPE_XPORTS,
	       "TPU__PIPE_XPORTS counts the table");

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
	bool keep[TPU__CHAN_MAX > TPU__PIPE_XPORTS ? TPU__CHAN_MAX : TPU__PIPE_XPORTS] = { false };
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
			idx = tpu__chan_index(tpu__chan_by_name(s, len));
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

static void policy_all(struct tpu__pipe_policy *pol)
{
	*pol = (struct tpu__pipe_policy){ { false }, { false }, 0 };
	for (unsigned int i = 0; i < TPU__PIPE_XPORTS; i++)
		pol->xport_ok[i] = true;
	for (unsigned int i = 0; i < tpu__nchans; i++)
		pol->chan_ok[i] = true;
}

/*
 * The public call lives here, on top, because only this layer knows every
 * transport and channel name the options may list; the context below it
 * is created by tpu__ctx_create().
 */
TPU_API tpu_status tpu_context_create(const struct tpu_context_options *opts,
				      struct tpu_context **out)
{
	struct tpu__pipe_policy pol;

	policy_all(&pol);
	if (opts && (narrow(opts->transports, pol.xport_ok, TPU__PIPE_XPORTS, true) ||
		     narrow(opts->channels, pol.chan_ok, tpu__nchans, false))) {
		if (out)
			*out = NULL;
		return -EINVAL;
	}
	return tpu__ctx_create(opts, out);
}

tpu_status tpu__pipe_policy(struct tpu_context *ctx, struct tpu__pipe_policy *out)
{
	tpu_status st;

	policy_all(out);
	st = tpu__mtcp_lanes_policy(&out->mtcp_lanes);
	if (!st)
		st = narrow(tpu__ctx_transports(ctx), out->xport_ok, TPU__PIPE_XPORTS, true);
	if (!st)
		st = narrow(getenv("TPU_TRANSPORTS"), out->xport_ok, TPU__PIPE_XPORTS, true);
	if (!st)
		st = narrow(tpu__ctx_channels(ctx), out->chan_ok, tpu__nchans, false);
	if (!st)
		st = narrow(getenv("TPU_CHANNELS"), out->chan_ok, tpu__nchans, false);
	for (unsigned int i = 0; i < tpu__nchans; i++)
		if ((tpu__ctx_flags(ctx) & TPU_CTX_NO_KMOD) && (tpu__chans[i]->flags & TPU__CHAN_MODULE))
			out->chan_ok[i] = false;
	/* Frames need no channel: basic stays, whatever the lists say. */
	out->chan_ok[tpu__chan_index(&tpu__chan_basic)] = true;
	return st;
}

tpu_status tpu__pipe_offer(struct tpu_context *ctx, const struct tpu__pipe_policy *pol,
			   struct tpu__pipe_offer *out)
{
	tpu_status st;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < sizeof(xports) / sizeof(xports[0]); i++) {
		if (!pol->xport_ok[i])
			continue;
		st = xports[i]->compat_descriptor(out->xports[out->nxports].compat,
						  sizeof(out->xports[0].compat));
		if (st)
			continue;
		out->xports[out->nxports++].xport = xports[i];
	}
	for (int i = (int)tpu__nchans - 1; i >= 0; i--) {
		const struct tpu__chan *c = tpu__chans[i];

		if (!pol->chan_ok[i])
			continue;
		st = c->descriptor(ctx, out->chans[out->nchans].compat,
				   sizeof(out->chans[0].compat));
		if (st) {
			tpu__log_debug("pipe: channel %s not offered: %s", c->name, tpu_strerror(st));
			continue;
		}
		out->chans[out->nchans++].chan = c;
	}
	return 0;
}
