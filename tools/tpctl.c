// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpctl: look at /dev/tensorpipe from the shell.
 *
 *   tpctl info [--dev PATH]   module ABI, features and limits, or why it is
 *                             not usable and what would be used instead
 *   tpctl stats [DOMAIN_ID]   the module's debugfs counters
 *   tpctl keys DOMAIN_ID      the keys pending in a domain, each side
 *   tpctl key parse KEY       split a TensorFlow rendezvous key
 *   tpctl version             library and ABI versions
 *   tpctl world [--env-only]  what the launcher's variables say (rank, size,
 *                             store), then the world formed: every rank's URLs
 *
 * Exit status: 0 success; 1 error; 2 the module is absent or unusable
 * (info and stats, after saying why).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tpu_user.h"
#include "units.h"

#define DEBUGFS		"/sys/kernel/debug"
#define STATS_DIR	DEBUGFS "/tensorpipe"
#define PARAMS_DIR	"/sys/module/tensorpipe/parameters"

enum { EXIT_ABSENT = 2 };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tpctl info [--dev PATH]    module ABI, features, limits (or why it is unusable)\n"
		"       tpctl stats [DOMAIN_ID]    counters from " STATS_DIR "\n"
		"       tpctl keys DOMAIN_ID       keys pending in a domain: sends (claimed while\n"
		"                                  delivered) and waiting receives (root)\n"
		"       tpctl key parse KEY        split a TensorFlow rendezvous key\n"
		"       tpctl version              library and ABI versions\n"
		"       tpctl pipes [URL]          what a pipe negotiates here: a listener on\n"
		"                                  loopback tcp and shm, a pipe to URL (default\n"
		"                                  its tcp URL); TPU_TRANSPORTS/TPU_CHANNELS apply\n"
		"       tpctl world [--env-only] [--timeout MS] [--job NAME]\n"
		"                                  rank, size, local rank and store address as\n"
		"                                  torchrun or mpirun set them; then (run by every\n"
		"                                  rank) form the world and print every rank's URLs\n"
		"exit status: 0 ok, 1 error, 2 module absent or unusable (explained on stdout)\n");
}

static void print_features(uint64_t features)
{
	const char *sep = "";
	int bit;

	printf("  features          ");
	for (bit = 0; bit < 64; bit++) {
		uint64_t f = 1ULL << bit;
		const char *name = tpu_feature_name(f);

		if (!(features & f))
			continue;
		if (name)
			printf("%s%s", sep, name);
		else
			printf("%sbit%d", sep, bit);
		sep = ", ";
	}
	printf("%s (0x%" PRIx64 ")\n", *sep ? "" : "none", features);
}

static int cmd_info(const char *dev)
{
	struct tpu_probe_result pr;
	struct tpu_endpoint *ep;
	struct tpu_info info;
	char sz[32];
	tpu_status st;

	printf("libtpu_user %s, built for tensorpipe ABI %u\n", tpu_version_string(),
	       tpu_abi_version());
	tpu_probe(dev, &pr);
	if (pr.path != TPU_PATH_KMOD) {
		printf("%s\n", pr.detail);
		printf("  kmod               %s (%s)\n", tpu_status_name(pr.kmod_status),
		       tpu_strerror(pr.kmod_status));
		printf("  process_vm_readv   %s\n",
		       pr.cma_status ? tpu_strerror(pr.cma_status) : "usable");
		if (pr.yama_ptrace_scope >= 0)
			printf("  yama ptrace_scope  %d\n", pr.yama_ptrace_scope);
		return EXIT_ABSENT;
	}
	st = tpu_endpoint_open(dev, &ep);
	if (!st) {
		st = tpu_endpoint_info(ep, &info);
		tpu_endpoint_close(ep);
	}
	if (st) {
		printf("%s: %s\n", dev ? dev : TPU_DEVICE_PATH, tpu_strerror(st));
		return 1;
	}
	printf("%s: tensorpipe module ABI %u\n", dev ? dev : TPU_DEVICE_PATH, info.abi_version);
	print_features(info.features);
	printf("  max_key_len       %u bytes\n", info.max_key_len);
	printf("  max_regions       %u per endpoint\n", info.max_regions);
	printf("  max_slots         %u pending per domain, outstanding per endpoint\n",
	       info.max_slots);
	printf("  max_region_bytes  %s\n", format_size(info.max_region_bytes, sz, sizeof(sz)));
	printf("  page_size         %u\n", info.page_size);
	printf("limits are module parameters (root may change them): %s/\n", PARAMS_DIR);
	return 0;
}

/* Why a debugfs file cannot be read, in terms of what to do about it. */
static int explain_stats_absent(const char *path)
{
	struct stat s;

	if (stat(DEBUGFS "/tensorpipe", &s) == 0) {
		printf("%s: no such file (no domain with that id?)\n", path);
		return 1;
	}
	if (stat("/sys/module/tensorpipe", &s) != 0) {
		printf("the tensorpipe module is not loaded: no statistics (insmod kmod/tensorpipe.ko)\n");
		return EXIT_ABSENT;
	}
	printf("%s is not readable: is debugfs mounted? (mount -t debugfs none %s; needs root)\n",
	       path, DEBUGFS);
	return EXIT_ABSENT;
}

static bool domain_id_ok(const char *domain)
{
	char *end;

	strtoull(domain, &end, 10);
	if (!*domain || *end) {
		fprintf(stderr, "tpctl: domain id must be a number: %s\n", domain);
		return false;
	}
	return true;
}

/*
 * The module's list of what is pending in a domain, key by key: a receive
 * that never matches its send because the keys differ by a byte shows up
 * next to it.
 */
static int cmd_keys(const char *domain)
{
	char path[256], line[4600];
	unsigned int n = 0;
	FILE *f;

	if (!domain_id_ok(domain))
		return 1;
	snprintf(path, sizeof(path), STATS_DIR "/keys-%s", domain);
	f = fopen(path, "re");
	if (!f)
		return explain_stats_absent(path);
	printf("%s (kind, key length, key; unprintable bytes as \\ooo)\n", path);
	while (fgets(line, sizeof(line), f)) {
		printf("  %s", line);
		n++;
	}
	fclose(f);
	if (!n)
		printf("  nothing pending\n");
	return 0;
}

static int cmd_stats(const char *domain)
{
	char path[256], line[256], name[128];
	unsigned long long value;
	FILE *f;

	if (domain) {
		if (!domain_id_ok(domain))
			return 1;
		snprintf(path, sizeof(path), STATS_DIR "/domain-%s", domain);
	} else {
		snprintf(path, sizeof(path), STATS_DIR "/stats");
	}
	f = fopen(path, "re");
	if (!f)
		return explain_stats_absent(path);
	printf("%s\n", path);
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%127s %llu", name, &value) == 2)
			printf("  %-16s %llu\n", name, value);
		else
			printf("  %s", line);
	}
	fclose(f);
	return 0;
}

static void print_slice(const char *label, struct tpu_str s)
{
	printf("  %-16s %.*s\n", label, (int)s.len, s.ptr);
}

static int cmd_key_parse(const char *text)
{
	struct tpu_key k;
	const char *why = NULL;
	tpu_status st = tpu_key_parse(tpu_str(text), &k, &why);

	if (st) {
		printf("not a rendezvous key: %s\n", why ? why : tpu_strerror(st));
		return 1;
	}
	print_slice("src_device", k.src_device);
	printf("  %-16s %016" PRIx64 "\n", "src_incarnation", k.src_incarnation);
	print_slice("dst_device", k.dst_device);
	print_slice("edge_name", k.edge_name);
	printf("  %-16s %" PRIu64 "\n", "frame_id", k.frame_id);
	printf("  %-16s %" PRIu64 "\n", "iter_id", k.iter_id);
	return 0;
}

static int cmd_version(void)
{
	uint32_t abi;
	tpu_status st = tpu_module_abi_version(NULL, &abi);

	printf("libtpu_user %s, built for tensorpipe ABI %u\n", tpu_version_string(),
	       tpu_abi_version());
	if (st)
		printf("module: %s\n", tpu_strerror(st));
	else
		printf("module: ABI %u\n", abi);
	return 0;
}

static void pipes_accepted(void *arg, tpu_status st, struct tpu_pipe *pipe)
{
	if (!st)
		*(struct tpu_pipe *_Atomic *)arg = pipe;
}

/* Connect to a listener of this process and say what the two ends chose. */
static int cmd_pipes(const char *url)
{
	struct tpu_pipe *_Atomic accepted = NULL;
	struct tpu_context *ctx = NULL;
	struct tpu_listener *l = NULL;
	struct tpu_pipe *pipe = NULL;
	char own[300], shm[300];
	tpu_status st;
	int rc = 1;

	st = tpu_context_create(NULL, &ctx);
	if (!st)
		st = tpu_listener_create(ctx, NULL, 0, &l);
	if (!st)
		st = tpu_listener_url(l, "tcp", own, sizeof(own));
	if (!st && !url)
		url = own;
	if (!st)
		st = tpu_listener_accept(l, pipes_accepted, (void *)&accepted);
	if (!st)
		st = tpu_pipe_connect(ctx, url, &pipe);
	if (st) {
		printf("pipes: %s\n", tpu_strerror(st));
		goto out;
	}
	/* Up to 10 s: the set-up is a few round trips. */
	for (int i = 0; i < 1000 && !*tpu_pipe_transport(pipe); i++)
		usleep(10000);
	printf("listener     %s\n", own);
	if (!tpu_listener_url(l, "shm", shm, sizeof(shm)))
		printf("             %s\n", shm);
	printf("connected to %s\n", url);
	if (!*tpu_pipe_transport(pipe)) {
		printf("not set up after 10 s (TPU_LOG=debug says why)\n");
		goto out;
	}
	printf("transport    %s\n", tpu_pipe_transport(pipe));
	printf("channel      %s (cpu -> cpu)\n",
	       tpu_pipe_channel(pipe, TPU_DEVICE_CPU, TPU_DEVICE_CPU));
	rc = 0;
out:
	tpu_pipe_close(pipe);
	if (accepted)
		tpu_pipe_close(accepted);
	tpu_listener_close(l);
	tpu_context_destroy(ctx);
	return rc;
}

static void print_world_info(const struct tpu_world_info *i)
{
	printf("[%d/%d] convention   %s\n", i->rank, i->size, i->convention);
	printf("[%d/%d] rank         %d of %d\n", i->rank, i->size, i->rank, i->size);
	if (i->local_rank >= 0)
		printf("[%d/%d] local rank   %d of %d on this host\n", i->rank, i->size,
		       i->local_rank, i->local_size);
	else
		printf("[%d/%d] local rank   not set\n", i->rank, i->size);
	printf("[%d/%d] store        %s:%u (from %s; rank 0 hosts it)\n", i->rank, i->size,
	       i->store_host, i->store_port, i->store_from);
}

/* What the launcher's variables say; then, unless @env_only, the world formed. */
static int cmd_world(bool env_only, uint32_t timeout_ms, const char *job)
{
	struct tpu_world_options o = { .timeout_ms = timeout_ms, .job = job };
	struct tpu_context *ctx = NULL;
	struct tpu_world *w = NULL;
	struct tpu_world_info info;
	tpu_status st;

	setvbuf(stdout, NULL, _IOLBF, 0);
	st = tpu_world_info_from_env(&info);
	if (st) {
		printf("world: %s\n", info.detail);
		return 1;
	}
	print_world_info(&info);
	if (env_only)
		return 0;
	o.info = &info;
	st = tpu_context_create(NULL, &ctx);
	if (!st)
		st = tpu_world_create(ctx, &o, &w);
	if (st) {
		printf("[%d/%d] world: %s\n", info.rank, info.size, tpu_strerror(st));
		tpu_context_destroy(ctx);
		return 1;
	}
	for (int r = 0; r < info.size; r++)
		printf("[%d/%d] rank %-4d rendezvous %s  pipes %s\n", info.rank, info.size, r,
		       tpu_world_url(w, r, "rdv"), tpu_world_url(w, r, "pipe"));
	tpu_world_destroy(w);
	tpu_context_destroy(ctx);
	return 0;
}

static int world_args(int argc, char **argv)
{
	const char *job = NULL;
	uint32_t timeout_ms = 0;
	bool env_only = false;
	char *end;

	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--env-only")) {
			env_only = true;
		} else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
			unsigned long v = strtoul(argv[++i], &end, 10);

			if (*end || !*argv[i] || v == 0 || v > 3600000) {
				fprintf(stderr, "tpctl: --timeout takes 1 .. 3600000 ms\n");
				return 1;
			}
			timeout_ms = (uint32_t)v;
		} else if (!strcmp(argv[i], "--job") && i + 1 < argc) {
			job = argv[++i];
		} else {
			usage(stderr);
			return 1;
		}
	}
	return cmd_world(env_only, timeout_ms, job);
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	if (!strcmp(cmd, "info") && argc == 2)
		return cmd_info(NULL);
	if (!strcmp(cmd, "info") && argc == 4 && !strcmp(argv[2], "--dev"))
		return cmd_info(argv[3]);
	if (!strcmp(cmd, "stats") && argc <= 3)
		return cmd_stats(argc == 3 ? argv[2] : NULL);
	if (!strcmp(cmd, "keys") && argc == 3)
		return cmd_keys(argv[2]);
	if (!strcmp(cmd, "key") && argc == 4 && !strcmp(argv[2], "parse"))
		return cmd_key_parse(argv[3]);
	if (!strcmp(cmd, "version") && argc == 2)
		return cmd_version();
	if (!strcmp(cmd, "world"))
		return world_args(argc, argv);
	if (!strcmp(cmd, "pipes") && argc <= 3)
		return cmd_pipes(argc == 3 ? argv[2] : NULL);
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		usage(stdout);
		return 0;
	}
	usage(stderr);
	return 1;
}
