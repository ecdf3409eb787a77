// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Rank, size and the store's address from what the launcher set: torchrun
 * (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT) or Open MPI's mpirun (OMPI_COMM_WORLD_*).  Parsing is
 * strict, and every refusal names the variable to fix, since a job that
 * starts with a wrong rank would hang later instead of failing now.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot.h"

/* Derived store ports (mpirun, one host): 20000 .. 49999. */
#define DERIVED_PORT_BASE	20000u
#define DERIVED_PORT_SPAN	30000u

struct names {
	const char *convention;
	const char *rank, *size, *local_rank, *local_size;
};

static const struct names torchrun = {
	"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
};
static const struct names openmpi = {
	"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
};

__attribute__((format(printf, 3, 4)))
static tpu_status refuse(struct tpu_world_info *info, tpu_status st, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(info->detail, sizeof(info->detail), fmt, ap);
	va_end(ap);
	tpu__log_debug("world: %s", info->detail);
	return st;
}

/* @name as a number in @min .. @max; -ENOENT when unset (and @detail says so). */
static tpu_status number(struct tpu_world_info *info, const char *name, uint64_t min, uint64_t max,
			 uint64_t *out)
{
	const char *v = getenv(name);

	if (!v)
		return refuse(info, -ENOENT, "%s is not set", name);
	if (!tpu__parse_dec(tpu_str(v), UINT64_MAX / 2, out))
		return refuse(info, -EINVAL, "%s=\"%.64s\" is not a decimal number", name, v);
	if (*out < min || *out > max)
		return refuse(info, -EINVAL, "%s=%s is out of range (%llu .. %llu)", name, v,
			      (unsigned long long)min, (unsigned long long)max);
	return 0;
}

bool tpu__boot_split_addr(const char *addr, char *host, size_t host_size, uint16_t *port)
{
	const char *colon, *h = addr;
	size_t hlen;
	uint64_t p;

	if (!addr)
		return false;
	if (*addr == '[') {
		const char *close = strchr(addr, ']');

		if (!close || close[1] != ':')
			return false;
		h = addr + 1;
		hlen = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strchr(addr, ':');
		if (!colon || strchr(colon + 1, ':'))
			return false;
		hlen = (size_t)(colon - addr);
	}
	if (!hlen || hlen >= host_size || memchr(h, ' ', hlen) ||
	    !tpu__parse_dec(tpu_str(colon + 1), 65535, &p) || !p)
		return false;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	*port = (uint16_t)p;
	return true;
}

static void set_store(struct tpu_world_info *info, const char *host, uint16_t port,
		      const char *from)
{
	snprintf(info->store_host, sizeof(info->store_host), "%s", host);
	info->store_port = port;
	snprintf(info->store_from, sizeof(info->store_from), "%s", from);
}

/* Under mpirun on one host: loopback, and a port that differs between jobs. */
static tpu_status derive_store(struct tpu_world_info *info)
{
	static const char *const ids[] = { "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE" };
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		const char *v = getenv(ids[i]);

		if (!v || !*v)
			continue;
		for (const char *p = v; *p; p++)
			h = (h ^ (uint8_t)*p) * 16777619u;
		set_store(info, "127.0.0.1", (uint16_t)(DERIVED_PORT_BASE + h % DERIVED_PORT_SPAN),
			  ids[i]);
		return 0;
	}
	return refuse(info, -EINVAL, "mpirun set no job id (OMPI_MCA_ess_base_jobid, "
		      "PMIX_NAMESPACE) to derive the store's port from: set TPU_STORE_ADDR=HOST:PORT");
}

static tpu_status store_address(struct tpu_world_info *info, bool mpi)
{
	const char *addr = getenv("TPU_STORE_ADDR");
	const char *maddr = getenv("MASTER_ADDR"), *mport = getenv("MASTER_PORT");
	char host[sizeof(info->store_host)];
	uint64_t port;
	uint16_t p16;
	tpu_status st;

	if (addr) {
		if (!tpu__boot_split_addr(addr, host, sizeof(host), &p16))
			return refuse(info, -EINVAL, "TPU_STORE_ADDR=\"%.64s\" is not HOST:PORT "
				      "or [V6]:PORT with PORT 1 .. 65535", addr);
		set_store(info, host, p16, "TPU_STORE_ADDR");
		return 0;
	}
	if (maddr || mport) {
		if (!maddr || !*maddr)
			return refuse(info, -EINVAL, "MASTER_PORT is set but MASTER_ADDR is not");
		if (strlen(maddr) >= sizeof(host) || strpbrk(maddr, " []"))
			return refuse(info, -EINVAL, "MASTER_ADDR=\"%.64s\" is not a host name "
				      "or address", maddr);
		/* MASTER_PORT itself belongs to torch's store: ours is the next one. */
		st = number(info, "MASTER_PORT", 1, 65534, &port);
		if (st)
			return st == -ENOENT ? refuse(info, -EINVAL, "MASTER_ADDR is set but "
						      "MASTER_PORT is not") : st;
		set_store(info, maddr, (uint16_t)(port + 1), "MASTER_ADDR/MASTER_PORT+1");
		return 0;
	}
	if (!mpi)
		return refuse(info, -EINVAL, "MASTER_ADDR and MASTER_PORT are not set (torchrun "
			      "sets them), nor is TPU_STORE_ADDR=HOST:PORT");
	if (info->local_size != info->size)
		return refuse(info, -EINVAL, "the ranks are not all on this host "
			      "(OMPI_COMM_WORLD_LOCAL_SIZE %s OMPI_COMM_WORLD_SIZE): set "
			      "TPU_STORE_ADDR=HOST:PORT (or MASTER_ADDR and MASTER_PORT) to rank 0's host",
			      info->local_size < 0 ? "unset, not" : "below");
	return derive_store(info);
}

static tpu_status read_ranks(struct tpu_world_info *info, const struct names *n)
{
	uint64_t rank, size, lrank, lsize;
	tpu_status st;
	bool has_lr = getenv(n->local_rank), has_ls = getenv(n->local_size);

	st = number(info, n->size, 1, TPU_WORLD_MAX, &size);
	if (!st)
		st = number(info, n->rank, 0, TPU_WORLD_MAX - 1, &rank);
	if (st)
		return st == -ENOENT ? -EINVAL : st;
	if (rank >= size)
		return refuse(info, -EINVAL, "%s=%llu is not below %s=%llu", n->rank,
			      (unsigned long long)rank, n->size, (unsigned long long)size);
	info->rank = (int)rank;
	info->size = (int)size;
	if (has_lr != has_ls)
		return refuse(info, -EINVAL, "%s is set but %s is not",
			      has_lr ? n->local_rank : n->local_size,
			      has_lr ? n->local_size : n->local_rank);
	if (!has_lr)
		return 0;
	st = number(info, n->local_size, 1, size, &lsize);
	if (!st)
		st = number(info, n->local_rank, 0, size - 1, &lrank);
	if (st)
		return st;
	if (lrank >= lsize)
		return refuse(info, -EINVAL, "%s=%llu is not below %s=%llu", n->local_rank,
			      (unsigned long long)lrank, n->local_size, (unsigned long long)lsize);
	info->local_rank = (int)lrank;
	info->local_size = (int)lsize;
	return 0;
}

TPU_API tpu_status tpu_world_info_from_env(struct tpu_world_info *info)
{
	const struct names *n;
	tpu_status st;

	if (!info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	info->local_rank = info->local_size = -1;
	/* mpirun set these for this very process; torch's may be inherited. */
	if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("OMPI_COMM_WORLD_RANK"))
		n = &openmpi;
	else if (getenv("WORLD_SIZE") || getenv("RANK"))
		n = &torchrun;
	else
		return refuse(info, -ENOENT, "no launcher's variables: neither RANK and WORLD_SIZE "
			      "(torchrun) nor OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (mpirun) are set");
	snprintf(info->convention, sizeof(info->convention), "%s", n->convention);
	st = read_ranks(info, n);
	if (!st)
		st = store_address(info, n == &openmpi);
	if (st)
		return st;
	tpu__log_debug("world: %s: rank %d of %d, local %d of %d, store %s:%u (%s)",
		       info->convention, info->rank, info->size, info->local_rank, info->local_size,
		       info->store_host, info->store_port, info->store_from);
	return 0;
}
