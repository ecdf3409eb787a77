// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Seed corpus for fuzz_pipe_wire: valid frames of every type, made by the
 * library's own encoders, each written twice (see fuzz_pipe_wire.c for
 * the selector byte): as a body of its type, and as a whole frame.
 *
 *   gen_seeds DIR
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipe_wire.h"

static const char *dir;
static int nseeds;
static uint8_t frame[1 << 16];

#define B(s) ((struct tpu__wire_blob){ (const uint8_t *)(s), sizeof(s) - 1 })

static void write_seed(const char *name, uint8_t sel, const uint8_t *data, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fputc(sel, f) == EOF || fwrite(data, 1, len, f) != len || fclose(f)) {
		perror(path);
		exit(1);
	}
	nseeds++;
}

static void seed(const char *name, uint16_t type, long n)
{
	char file[256];

	if (n < TPU__WIRE_HDR_LEN) {
		fprintf(stderr, "gen_seeds: %s does not encode (%ld)\n", name, n);
		exit(1);
	}
	snprintf(file, sizeof(file), "%s-body", name);
	write_seed(file, (uint8_t)type, frame + TPU__WIRE_HDR_LEN, n - TPU__WIRE_HDR_LEN);
	snprintf(file, sizeof(file), "%s-frame", name);
	write_seed(file, 0, frame, n);
}

int main(int argc, char **argv)
{
	struct tpu__wire_hello h = { .version = TPU__WIRE_VERSION };
	struct tpu__wire_welcome w = { 0 };
	struct tpu__wire_payload p[2] = { { 0, B("") }, { 123, B("pm") } };
	struct tpu__wire_tensor t[3] = {
		{ 10, 0, 0, 0, 0, TPU__WIRE_INLINE, B("t"), B("") },
		{ 1 << 20, 0, 0, 0, 0, 0, B(""), B("pid=1;addr=0x1000") },
		{ 5, 1, 2, 1, 3, 1, B("x"), B("k") },
	};
	struct tpu__wire_msg m = { 0 };
	struct tpu__wire_ack a = { 3, 2, -EIO };
	struct tpu__wire_join j = { 0x0123456789abcdefull, 2 };

	if (argc != 2) {
		fprintf(stderr, "usage: gen_seeds DIR\n");
		return 2;
	}
	dir = argv[1];

	seed("hello-empty", TPU__WIRE_HELLO, tpu__wire_hello_encode(frame, sizeof(frame), &h));
	h.nxports = 2;
	h.xports[0] = (struct tpu__wire_xport_entry){ B("tcp"), B(""), B("") };
	h.xports[1] = (struct tpu__wire_xport_entry){ B("shm"), B("boot:1234"), B("") };
	h.nchans = 3;
	h.chans[0] = (struct tpu__wire_chan_entry){ B("basic"), 0, 0, B("") };
	h.chans[1] = (struct tpu__wire_chan_entry){ B("cma"), 0, 0, B("host;uid") };
	h.chans[2] = (struct tpu__wire_chan_entry){ B("kmod"), 0, 1, B("d") };
	seed("hello", TPU__WIRE_HELLO, tpu__wire_hello_encode(frame, sizeof(frame), &h));

	w.xport = (struct tpu__wire_xport_entry){ B("tcp"), B(""), B("127.0.0.1:5000") };
	w.token = 42;
	w.lanes = 4;
	w.nchans = 2;
	w.chans[0] = (struct tpu__wire_chan_entry){ B("mtcp"), 0, 0, B("") };
	w.chans[1] = (struct tpu__wire_chan_entry){ B("basic"), 1, 0, B("") };
	seed("welcome", TPU__WIRE_WELCOME, tpu__wire_welcome_encode(frame, sizeof(frame), &w));
	w.status = -ENOPROTOOPT;
	seed("welcome-error", TPU__WIRE_WELCOME,
	     tpu__wire_welcome_encode(frame, sizeof(frame), &w));

	seed("join", TPU__WIRE_JOIN, tpu__wire_join_encode(frame, sizeof(frame), &j));
	seed("ack", TPU__WIRE_ACK, tpu__wire_ack_encode(frame, sizeof(frame), &a));

	seed("msg-empty", TPU__WIRE_MSG, tpu__wire_msg_encode(frame, sizeof(frame), &m));
	m = (struct tpu__wire_msg){ .seq = 7, .meta = B("meta"), .npayloads = 2, .ntensors = 3,
				    .payloads = p, .tensors = t };
	seed("msg", TPU__WIRE_MSG, tpu__wire_msg_encode(frame, sizeof(frame), &m));

	/* blob_str: room byte, then the blob. */
	write_seed("blob-str", 6, (const uint8_t *)"\x08tcp", 4);
	write_seed("blob-str-nul", 6, (const uint8_t *)"\x10shm\0x", 6);

	printf("gen_seeds: %d seeds in %s\n", nseeds, dir);
	return 0;
}
