// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "tap.h"
#include "tpu_user.h"

static const int library_codes[] = {
	TPU_E_NO_DEVICE, TPU_E_NOT_TENSORPIPE, TPU_E_ABI_MISMATCH,
	TPU_E_BAD_KEY, TPU_E_BAD_DEVICE_NAME, TPU_E_NO_TRANSPORT, TPU_E_CLOSED,
	TPU_E_PEER_GONE, TPU_E_DESTROYED, TPU_E_FORKED, TPU_E_URL_SCHEME, TPU_E_URL_PORT,
	TPU_E_COLL_MISMATCH, TPU_E_NO_CUDA, TPU_E_CUDA, TPU_E_BAD_BLOB, TPU_E_REVOKED,
};

/* Every errno the module's header lists for some command. */
static const int module_errnos[] = {
	EFAULT, EPERM, EINVAL, ENOTTY, E2BIG, ENOSPC, ENOMEM, ENOENT, EMFILE, EBADF, EBUSY,
	ENAMETOOLONG, ENOLINK, EACCES, ERANGE, EEXIST, ENOBUFS, EMSGSIZE, EAGAIN, ETIMEDOUT,
	EINTR, ECANCELED, EALREADY,
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void strerror_is_never_null(void)
{
	static const int probes[] = { INT_MIN, -20000, -10007, -10000, -4096, -4095, -1, 0, 1, INT_MAX };
	bool ok = true;
	size_t i;
	int s;

	for (s = -11000; s <= 10; s++)
		ok &= tpu_strerror(s) && *tpu_strerror(s) && tpu_status_name(s) && *tpu_status_name(s);
	for (i = 0; i < N(probes); i++)
		ok &= tpu_strerror(probes[i]) && tpu_status_name(probes[i]);
	CHECK(ok, "strerror_and_status_name_never_return_null_or_empty");
}

static void library_codes_have_own_names(void)
{
	size_t i;

	for (i = 0; i < N(library_codes); i++) {
		const char *name = tpu_status_name(library_codes[i]);

		CHECK(!strncmp(name, "TPU_E_", 6) && library_codes[i] < -TPU_ERRNO_MAX,
		      "library_code_%d_is_named_%s_and_below_errno_range", library_codes[i], name);
	}
}

static void module_errnos_are_described(void)
{
	size_t i;

	for (i = 0; i < N(module_errnos); i++) {
		const char *name = tpu_status_name(-module_errnos[i]);

		CHECK(name[0] == 'E' && strcmp(name, "ERRNO") &&
		      strcmp(tpu_strerror(-module_errnos[i]), tpu_strerror(-EXDEV)),
		      "module_errno_%s_has_a_name_and_its_own_sentence", name);
	}
}

/*
 * What the cma, inprocess and remote rendezvous return reads in their words:
 * no module, domain, endpoint or slot unless the sentence says "for the module".
 */
static void paths_without_the_module_read_in_their_own_words(void)
{
	static const int common[] = { EEXIST, ENAMETOOLONG, EALREADY, ENOSPC, EMSGSIZE, E2BIG,
				      ETIMEDOUT, ECANCELED, EINVAL };
	static const char *const module_words[] = { "domain", "endpoint", "slot", "SEND" };
	size_t i, j;

	for (i = 0; i < N(common); i++) {
		const char *s = tpu_strerror(-common[i]);
		const char *m = strstr(s, "module");
		bool ok = !m || strstr(s, "for the module");

		for (j = 0; j < N(module_words); j++)
			ok &= !strstr(s, module_words[j]);
		CHECK(ok, "errno_%s_reads_without_module_words (\"%s\")", tpu_status_name(-common[i]), s);
	}
}

static void ignore_pipe(void *arg, tpu_status status, struct tpu_pipe *pipe)
{
	(void)arg;
	(void)status;
	tpu_pipe_close(pipe);
}

/*
 * Texts that spoke of one cause where the status has several: EBUSY of a
 * donated region (an accept already pending is the common case), the rdma
 * listener's refusals of process_vm_readv, an rdma URL's missing port of
 * tcp.  Each is checked on the status a real call returns.
 */
static void texts_fit_what_happened(void)
{
	struct tpu_context_options tcp_only = { .transports = "tcp" };
	static const char *const rdma_no_port[] = { "rdma://127.0.0.1" };
	static const char *const rdma_url[] = { "rdma://127.0.0.1:0" };
	static const char *const tcp_url[] = { "tcp://127.0.0.1:0" };
	struct tpu_context *ctx = NULL, *tcx = NULL;
	struct tpu_listener *l = NULL;
	tpu_status st;
	const char *s;

	s = tpu_strerror(-EBUSY);
	CHECK(!strstr(s, "donated") && strstr(s, "accept"),
	      "ebusy_text_names_a_pending_accept_not_a_donated_region (\"%s\")", s);
	s = tpu_strerror(TPU_E_URL_PORT);
	CHECK(strstr(s, "rdma://") && !strstr(s, "the tcp URL"),
	      "url_port_text_covers_rdma_urls (\"%s\")", s);
	s = tpu_strerror(TPU_E_NO_TRANSPORT);
	CHECK(strstr(s, "TPU_TRANSPORTS") && !strstr(s, "process_vm_readv is not permitted"),
	      "no_transport_text_names_a_transport_ruled_out (\"%s\")", s);
	if (tpu_context_create(NULL, &ctx) || tpu_context_create(&tcp_only, &tcx)) {
		CHECK(false, "status_texts_contexts_created");
		tpu_context_destroy(ctx);
		return;
	}
	st = tpu_listener_create(tcx, rdma_url, 1, &l);
	CHECK(st == TPU_E_NO_TRANSPORT && !strstr(tpu_strerror(st), "process_vm_readv is not"),
	      "rdma_listener_in_a_tcp_only_context_says_the_transport_is_ruled_out (%s)",
	      tpu_status_name(st));
	st = tpu_listener_create(ctx, rdma_no_port, 1, &l);
	CHECK(st == TPU_E_URL_PORT && strstr(tpu_strerror(st), "rdma://"),
	      "rdma_url_without_port_says_so_for_rdma (%s)", tpu_status_name(st));
	st = tpu_listener_create(ctx, tcp_url, 1, &l);
	if (!st)
		st = tpu_listener_accept(l, ignore_pipe, NULL);
	if (!st)
		st = tpu_listener_accept(l, ignore_pipe, NULL);
	CHECK(st == -EBUSY && strstr(tpu_strerror(st), "accept"),
	      "second_pending_accept_is_ebusy_and_its_text_says_accept (%s)", tpu_status_name(st));
	tpu_listener_close(l);
	tpu_context_destroy(tcx);
	tpu_context_destroy(ctx);
}

void test_status(void)
{
	CHECK(!strcmp(tpu_status_name(TPU_OK), "OK") && !strcmp(tpu_strerror(0), "success"),
	      "status_zero_is_ok_and_reads_success");
	strerror_is_never_null();
	library_codes_have_own_names();
	module_errnos_are_described();
	CHECK(!strcmp(tpu_status_name(-EMSGSIZE), "EMSGSIZE") &&
	      strstr(tpu_strerror(-EMSGSIZE), "retry"),
	      "emsgsize_explains_that_the_slot_stays_for_a_retry");
	CHECK(strstr(tpu_strerror(-ENOLINK), "domain") != NULL,
	      "enolink_reads_as_not_attached_to_a_domain");
	paths_without_the_module_read_in_their_own_words();
	texts_fit_what_happened();
	/* Every errno has its name and the C library's sentence, not a generic one. */
	CHECK(!strcmp(tpu_status_name(-EXDEV), "EXDEV") &&
	      strstr(tpu_strerror(-EXDEV), "cross-device") != NULL,
	      "unlisted_errno_has_its_name_and_the_c_librarys_sentence");
	CHECK(!strcmp(tpu_status_name(-EHOSTDOWN), "EHOSTDOWN") &&
	      strcmp(tpu_strerror(-EHOSTDOWN), tpu_strerror(-ENOTCONN)),
	      "unlisted_errnos_read_differently");
	CHECK(!strcmp(tpu_status_name(5), "UNKNOWN") && !strcmp(tpu_status_name(-10999), "UNKNOWN"),
	      "positive_and_unassigned_values_are_unknown");
}
