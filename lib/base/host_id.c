// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Facts about this machine and process, for compatibility descriptors (xport.h). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"

tpu_status tpu__boot_id(char *buf, size_t size)
{
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return tpu__errno();
	n = read(fd, buf, size ? size - 1 : 0);
	close(fd);
	if (n <= 0)
		return n < 0 ? tpu__errno() : -EIO;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

unsigned long tpu__ns_inode(const char *ns)
{
	char path[64];
	struct stat sb;

	snprintf(path, sizeof(path), "/proc/self/ns/%s", ns);
	return stat(path, &sb) ? 0 : (unsigned long)sb.st_ino;
}
