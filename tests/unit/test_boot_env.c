// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpu_world_info_from_env(): the variables torchrun and Open MPI's mpirun
 * set, read strictly.  Every refusal must name the variable to fix.
 */
#include <errno.h>
#include <string.h>

#include "boot_harness.h"
#include "tap.h"
#include "tpu_user.h"

#define END	NULL

struct good {
	const char *name;
	const char *vars[12];
	int rank, size, local_rank, local_size;
	const char *convention, *host;
	int port;			/* -1: derived, checked for its range */
	const char *from;
};

static const struct good goods[] = {
	{ "torchrun_sets_rank_size_local_and_store_next_to_master_port",
	  { "RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
	    "MASTER_ADDR=127.0.0.2", "MASTER_PORT=29500", END },
	  1, 4, 1, 2, "torchrun", "127.0.0.2", 29501, "MASTER_ADDR/MASTER_PORT+1" },
	{ "torchrun_without_local_variables_reports_them_unknown",
	  { "RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=node0", "MASTER_PORT=1", END },
	  0, 1, -1, -1, "torchrun", "node0", 2, "MASTER_ADDR/MASTER_PORT+1" },
	{ "tpu_store_addr_overrides_master_addr",
	  { "RANK=2", "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.3", "MASTER_PORT=29500",
	    "TPU_STORE_ADDR=[::1]:7000", END },
	  2, 3, -1, -1, "torchrun", "::1", 7000, "TPU_STORE_ADDR" },
	{ "mpirun_on_one_host_derives_a_loopback_store_from_the_job_id",
	  { "OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=3", "OMPI_COMM_WORLD_LOCAL_RANK=2",
	    "OMPI_COMM_WORLD_LOCAL_SIZE=3", "OMPI_MCA_ess_base_jobid=297205761", END },
	  2, 3, 2, 3, "openmpi", "127.0.0.1", -1, "OMPI_MCA_ess_base_jobid" },
	{ "mpirun_without_ess_jobid_uses_pmix_namespace",
	  { "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0",
	    "OMPI_COMM_WORLD_LOCAL_SIZE=2", "PMIX_NAMESPACE=4242", END },
	  0, 2, 0, 2, "openmpi", "127.0.0.1", -1, "PMIX_NAMESPACE" },
	{ "mpirun_across_hosts_uses_master_addr",
	  { "OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=1",
	    "OMPI_COMM_WORLD_LOCAL_SIZE=2", "MASTER_ADDR=head", "MASTER_PORT=5000", END },
	  3, 4, 1, 2, "openmpi", "head", 5001, "MASTER_ADDR/MASTER_PORT+1" },
	{ "mpirun_variables_win_over_inherited_torch_ones",
	  { "RANK=5", "WORLD_SIZE=9", "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
	    "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
	    "TPU_STORE_ADDR=127.0.0.1:4000", END },
	  1, 2, 1, 2, "openmpi", "127.0.0.1", 4000, "TPU_STORE_ADDR" },
	{ "largest_world_is_accepted",
	  { "RANK=1023", "WORLD_SIZE=1024", "TPU_STORE_ADDR=h:65535", END },
	  1023, 1024, -1, -1, "torchrun", "h", 65535, "TPU_STORE_ADDR" },
};

struct bad {
	const char *name;
	const char *vars[10];
	tpu_status want;
	const char *names;		/* the variable the reason must name */
};

#define TORCH_OK "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"
#define OMPI_ONE_HOST "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=2"

static const struct bad bads[] = {
	{ "no_launcher_variables_is_enoent", { END }, -ENOENT, "WORLD_SIZE" },
	{ "rank_without_world_size", { "RANK=0", TORCH_OK, END }, -EINVAL, "WORLD_SIZE" },
	{ "world_size_without_rank", { "WORLD_SIZE=2", TORCH_OK, END }, -EINVAL, "RANK" },
	{ "world_size_not_a_number", { "RANK=0", "WORLD_SIZE=two", TORCH_OK, END }, -EINVAL,
	  "WORLD_SIZE" },
	{ "world_size_empty", { "RANK=0", "WORLD_SIZE=", TORCH_OK, END }, -EINVAL, "WORLD_SIZE" },
	{ "world_size_zero", { "RANK=0", "WORLD_SIZE=0", TORCH_OK, END }, -EINVAL, "WORLD_SIZE" },
	{ "world_size_over_the_limit", { "RANK=0", "WORLD_SIZE=1025", TORCH_OK, END }, -EINVAL,
	  "WORLD_SIZE" },
	{ "world_size_overflowing", { "RANK=0", "WORLD_SIZE=99999999999999999999999", TORCH_OK,
	  END }, -EINVAL, "WORLD_SIZE" },
	{ "world_size_with_leading_zero", { "RANK=0", "WORLD_SIZE=02", TORCH_OK, END }, -EINVAL,
	  "WORLD_SIZE" },
	{ "world_size_with_sign", { "RANK=0", "WORLD_SIZE=+2", TORCH_OK, END }, -EINVAL,
	  "WORLD_SIZE" },
	{ "world_size_with_space", { "RANK=0", "WORLD_SIZE=2 ", TORCH_OK, END }, -EINVAL,
	  "WORLD_SIZE" },
	{ "rank_negative", { "RANK=-1", "WORLD_SIZE=2", TORCH_OK, END }, -EINVAL, "RANK" },
	{ "rank_not_below_size", { "RANK=2", "WORLD_SIZE=2", TORCH_OK, END }, -EINVAL, "RANK" },
	{ "local_rank_without_local_size", { "RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", TORCH_OK,
	  END }, -EINVAL, "LOCAL_WORLD_SIZE" },
	{ "local_size_without_local_rank", { "RANK=0", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2",
	  TORCH_OK, END }, -EINVAL, "LOCAL_RANK" },
	{ "local_rank_not_below_local_size", { "RANK=0", "WORLD_SIZE=4", "LOCAL_RANK=2",
	  "LOCAL_WORLD_SIZE=2", TORCH_OK, END }, -EINVAL, "LOCAL_RANK" },
	{ "local_size_over_size", { "RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0",
	  "LOCAL_WORLD_SIZE=3", TORCH_OK, END }, -EINVAL, "LOCAL_WORLD_SIZE" },
	{ "local_rank_garbage", { "RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=x",
	  "LOCAL_WORLD_SIZE=2", TORCH_OK, END }, -EINVAL, "LOCAL_RANK" },
	{ "torchrun_without_master", { "RANK=0", "WORLD_SIZE=2", END }, -EINVAL, "MASTER_ADDR" },
	{ "master_addr_without_port", { "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", END }, -EINVAL,
	  "MASTER_PORT" },
	{ "master_port_without_addr", { "RANK=0", "WORLD_SIZE=2", "MASTER_PORT=5", END }, -EINVAL,
	  "MASTER_ADDR" },
	{ "master_addr_empty", { "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=", "MASTER_PORT=5", END },
	  -EINVAL, "MASTER_ADDR" },
	{ "master_addr_with_space", { "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=a b",
	  "MASTER_PORT=5", END }, -EINVAL, "MASTER_ADDR" },
	{ "master_port_zero", { "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=0", END },
	  -EINVAL, "MASTER_PORT" },
	{ "master_port_leaving_no_room_for_ours", { "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h",
	  "MASTER_PORT=65535", END }, -EINVAL, "MASTER_PORT" },
	{ "master_port_not_a_number", { "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h",
	  "MASTER_PORT=http", END }, -EINVAL, "MASTER_PORT" },
	{ "store_addr_without_port", { "RANK=0", "WORLD_SIZE=2", "TPU_STORE_ADDR=host", END },
	  -EINVAL, "TPU_STORE_ADDR" },
	{ "store_addr_with_empty_port", { "RANK=0", "WORLD_SIZE=2", "TPU_STORE_ADDR=host:", END },
	  -EINVAL, "TPU_STORE_ADDR" },
	{ "store_addr_port_zero", { "RANK=0", "WORLD_SIZE=2", "TPU_STORE_ADDR=host:0", END },
	  -EINVAL, "TPU_STORE_ADDR" },
	{ "store_addr_port_too_big", { "RANK=0", "WORLD_SIZE=2", "TPU_STORE_ADDR=host:65536",
	  END }, -EINVAL, "TPU_STORE_ADDR" },
	{ "store_addr_without_host", { "RANK=0", "WORLD_SIZE=2", "TPU_STORE_ADDR=:80", END },
	  -EINVAL, "TPU_STORE_ADDR" },
	{ "store_addr_bare_ipv6", { "RANK=0", "WORLD_SIZE=2", "TPU_STORE_ADDR=::1:80", END },
	  -EINVAL, "TPU_STORE_ADDR" },
	{ "store_addr_bracket_without_colon", { "RANK=0", "WORLD_SIZE=2",
	  "TPU_STORE_ADDR=[::1]80", END }, -EINVAL, "TPU_STORE_ADDR" },
	{ "mpirun_rank_not_below_size", { "OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=3",
	  "TPU_STORE_ADDR=h:1", END }, -EINVAL, "OMPI_COMM_WORLD_RANK" },
	{ "mpirun_size_missing", { "OMPI_COMM_WORLD_RANK=0", "TPU_STORE_ADDR=h:1", END }, -EINVAL,
	  "OMPI_COMM_WORLD_SIZE" },
	{ "mpirun_local_rank_without_local_size", { "OMPI_COMM_WORLD_RANK=0",
	  "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0", "TPU_STORE_ADDR=h:1", END },
	  -EINVAL, "OMPI_COMM_WORLD_LOCAL_SIZE" },
	{ "mpirun_across_hosts_without_store_address", { "OMPI_COMM_WORLD_RANK=0",
	  "OMPI_COMM_WORLD_SIZE=4", OMPI_ONE_HOST, "OMPI_MCA_ess_base_jobid=1", END }, -EINVAL,
	  "TPU_STORE_ADDR" },
	{ "mpirun_without_local_size_or_store_address", { "OMPI_COMM_WORLD_RANK=0",
	  "OMPI_COMM_WORLD_SIZE=2", "OMPI_MCA_ess_base_jobid=1", END }, -EINVAL, "TPU_STORE_ADDR" },
	{ "mpirun_one_host_without_job_id", { "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2",
	  OMPI_ONE_HOST, END }, -EINVAL, "TPU_STORE_ADDR" },
};

static void goods_parse(void)
{
	for (size_t i = 0; i < sizeof(goods) / sizeof(goods[0]); i++) {
		const struct good *g = &goods[i];
		struct tpu_world_info info;
		tpu_status st;

		boot_env_clear();
		boot_env_set(g->vars);
		st = tpu_world_info_from_env(&info);
		if (st)
			tap_diag("%s: %s", tpu_status_name(st), info.detail);
		CHECK(!st && info.rank == g->rank && info.size == g->size &&
		      info.local_rank == g->local_rank && info.local_size == g->local_size &&
		      !strcmp(info.convention, g->convention) && !strcmp(info.store_host, g->host) &&
		      (g->port < 0 ? info.store_port >= 20000 && info.store_port < 50000
				   : info.store_port == g->port) &&
		      !strcmp(info.store_from, g->from), "%s", g->name);
	}
}

static void bads_refused(void)
{
	for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		const struct bad *b = &bads[i];
		struct tpu_world_info info;
		tpu_status st;

		boot_env_clear();
		boot_env_set(b->vars);
		st = tpu_world_info_from_env(&info);
		if (st != b->want || !strstr(info.detail, b->names))
			tap_diag("%s: got %s, \"%s\"", b->name, tpu_status_name(st), info.detail);
		CHECK(st == b->want && strstr(info.detail, b->names),
		      "env_refuses_%s_naming_%s", b->name, b->names);
	}
}

/* Two runs of one job agree on the port; another job gets another one. */
static void derived_port_depends_on_the_job_only(void)
{
	static const char *const base[] = { "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
					    "OMPI_COMM_WORLD_LOCAL_RANK=0", END };
	struct tpu_world_info a, b, c;
	bool ok;

	boot_env_clear();
	boot_env_set(base);
	setenv("OMPI_MCA_ess_base_jobid", "1000", 1);
	setenv("OMPI_COMM_WORLD_RANK", "0", 1);
	ok = !tpu_world_info_from_env(&a);
	setenv("OMPI_COMM_WORLD_RANK", "1", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
	ok &= !tpu_world_info_from_env(&b);
	setenv("OMPI_MCA_ess_base_jobid", "2000", 1);
	ok &= !tpu_world_info_from_env(&c);
	CHECK(ok && a.store_port == b.store_port && a.store_port != c.store_port,
	      "derived_store_port_is_the_same_for_every_rank_of_a_job_and_differs_between_jobs");
}

void test_boot_env(void)
{
	CHECK(tpu_world_info_from_env(NULL) == -EINVAL, "world_info_from_env_null_is_einval");
	goods_parse();
	bads_refused();
	derived_port_depends_on_the_job_only();
	boot_env_clear();
}
