// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "boot_harness.h"
#include "tap.h"

static const char *const launcher_vars[] = {
	"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
	"OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE",
	"TPU_STORE_ADDR",
};

void boot_env_clear(void)
{
	for (size_t i = 0; i < sizeof(launcher_vars) / sizeof(launcher_vars[0]); i++)
		unsetenv(launcher_vars[i]);
}

void boot_env_set(const char *const *vars)
{
	for (; *vars; vars++) {
		const char *eq = strchr(*vars, '=');
		char name[64];

		if (!eq || (size_t)(eq - *vars) >= sizeof(name))
			continue;
		memcpy(name, *vars, (size_t)(eq - *vars));
		name[eq - *vars] = '\0';
		setenv(name, eq + 1, 1);
	}
}

uint16_t boot_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	uint16_t port = 0;

	if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    !getsockname(fd, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

bool boot_port_is_free(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	if (fd < 0)
		return false;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	ok = !bind(fd, (struct sockaddr *)&a, sizeof(a));
	close(fd);
	return ok;
}

uint64_t boot_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

bool boot_run_ranks(int n, int (*fn)(int rank, int n, void *arg), void *arg, unsigned int limit_s)
{
	pid_t pid[16];
	bool ok = true;
	int status;

	fflush(NULL);
	for (int r = 0; r < n && r < 16; r++) {
		pid[r] = fork();
		if (pid[r] == 0) {
			alarm(limit_s);
			_exit(fn(r, n, arg));
		}
		if (pid[r] < 0)
			return false;
	}
	for (int r = 0; r < n && r < 16; r++) {
		if (waitpid(pid[r], &status, 0) != pid[r])
			ok = false;
		else if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			tap_diag("rank %d of %d: %s %d", r, n,
				 WIFEXITED(status) ? "failed at line (mod 250)" : "killed by signal",
				 WIFEXITED(status) ? WEXITSTATUS(status) - 1 : WTERMSIG(status));
			ok = false;
		}
	}
	return ok;
}
