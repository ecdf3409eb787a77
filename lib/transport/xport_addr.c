// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Addresses of the network transports (tcp, rdma): "HOST:PORT" and
 * "[V6]:PORT", split, resolved and printed the same way for both so that a
 * URL means the same host and port whichever scheme it names.
 */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xport.h"

tpu_status tpu__xport_split_addr(const char *addr, char *host, size_t hsize, char *port,
				 size_t psize)
{
	const char *colon, *h = addr;
	size_t hlen;

	if (!addr)
		return -EINVAL;
	if (addr[0] == '[') {
		const char *end = strchr(addr, ']');

		if (!end || end[1] != ':')
			return -EINVAL;
		h = addr + 1;
		hlen = (size_t)(end - h);
		colon = end + 1;
	} else {
		colon = strrchr(addr, ':');
		if (!colon)
			return *addr ? TPU_E_URL_PORT : -EINVAL;
		if (memchr(addr, ':', (size_t)(colon - addr)))
			return -EINVAL;
		hlen = (size_t)(colon - addr);
	}
	if (hlen && !colon[1])
		return TPU_E_URL_PORT;
	if (!hlen || hlen >= hsize || strlen(colon + 1) >= psize)
		return -EINVAL;
	for (const char *c = colon + 1; *c; c++)
		if (*c < '0' || *c > '9')
			return -EINVAL;
	if (strtoul(colon + 1, NULL, 10) > 65535)
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	strcpy(port, colon + 1);
	return 0;
}

tpu_status tpu__xport_resolve(const char *addr, bool passive, struct addrinfo **res)
{
	struct addrinfo hints = {
		.ai_socktype = SOCK_STREAM,
		.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0),
	};
	char host[TPU__XPORT_ADDR_MAX], port[8];
	tpu_status st = tpu__xport_split_addr(addr, host, sizeof(host), port, sizeof(port));
	int err;

	if (st)
		return st;
	err = getaddrinfo(host, port, &hints, res);
	if (err == EAI_SYSTEM)
		return tpu__errno();
	if (err == EAI_MEMORY)
		return -ENOMEM;
	return err ? -EINVAL : 0;
}

void tpu__xport_format_addr(const struct sockaddr *sa, socklen_t salen, char *buf, size_t size)
{
	char host[INET6_ADDRSTRLEN] = "?", port[8] = "0";

	getnameinfo(sa, salen, host, sizeof(host), port, sizeof(port),
		    NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(buf, size, sa->sa_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
}
