// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Status names and sentences.  The library keeps its own table instead of
 * calling strerror(): strerror is not thread-safe for unknown numbers, and
 * the sentences here say what an errno means for tensorpipe (ENOLINK is "not
 * attached to a domain", not "link has been severed").
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "tpu_user.h"

struct status_text {
	tpu_status status;
	const char *name;
	const char *text;
};

static const struct status_text status_texts[] = {
	{ TPU_OK, "OK", "success" },
	{ TPU_E_NO_DEVICE, "TPU_E_NO_DEVICE",
	  "no such device: /dev/tensorpipe absent (module not loaded), or no RDMA device for rdma://" },
	{ TPU_E_NOT_TENSORPIPE, "TPU_E_NOT_TENSORPIPE",
	  "not a tensorpipe device: it does not answer TP_IOC_GET_INFO" },
	{ TPU_E_ABI_MISMATCH, "TPU_E_ABI_MISMATCH",
	  "the module speaks another tensorpipe ABI version than this library" },
	{ TPU_E_BAD_KEY, "TPU_E_BAD_KEY",
	  "malformed rendezvous key (want SRC;INCARNATION;DST;EDGE;FRAME:ITER)" },
	{ TPU_E_BAD_DEVICE_NAME, "TPU_E_BAD_DEVICE_NAME",
	  "malformed device name (want /job:J/replica:R/task:T/device:TYPE:N)" },
	{ TPU_E_NO_TRANSPORT, "TPU_E_NO_TRANSPORT",
	  "nothing usable for this: a pipe transport the context or TPU_TRANSPORTS rules out, or "
	  "no rendezvous implementation viable here (TPU_LOG=debug and tpu_probe() say why)" },
	{ TPU_E_CLOSED, "TPU_E_CLOSED",
	  "closed: the context, rendezvous, pipe or listener went away first" },
	{ TPU_E_PEER_GONE, "TPU_E_PEER_GONE",
	  "the peer process died: its end of the rendezvous went away" },
	{ TPU_E_DESTROYED, "TPU_E_DESTROYED",
	  "object used after it was destroyed or closed, or destroyed twice" },
	{ TPU_E_URL_SCHEME, "TPU_E_URL_SCHEME",
	  "unknown URL scheme: a pipe URL starts with tcp://, shm:// or rdma://" },
	{ TPU_E_URL_PORT, "TPU_E_URL_PORT",
	  "the URL has no port: write tcp://HOST:PORT or rdma://HOST:PORT "
	  "(PORT 0 lets a listener pick one)" },
	{ TPU_E_COLL_MISMATCH, "TPU_E_COLL_MISMATCH",
	  "the members of a collective disagree on its parameters (tpu_coll_last_reason says which)" },
	{ TPU_E_NO_CUDA, "TPU_E_NO_CUDA",
	  "no usable CUDA driver: libcuda.so.1 (or TPU_CUDA_DRIVER) not loadable, no GPU, or CUDA support not built" },
	{ TPU_E_CUDA, "TPU_E_CUDA",
	  "a CUDA driver call failed (TPU_LOG=debug names the call and the driver's error)" },
	{ TPU_E_BAD_BLOB, "TPU_E_BAD_BLOB",
	  "not a transfer metadata blob of this library (truncated, corrupted, another version, "
	  "or its address now serves another agent)" },
	{ TPU_E_REVOKED, "TPU_E_REVOKED",
	  "the registration was deregistered or its agent is gone: nothing may reach it" },
	{ TPU_E_FORKED, "TPU_E_FORKED",
	  "context used in a forked child: create a new context in the child" },

	{ -EPERM, "EPERM",
	  "operation not permitted (endpoint used by another process, or ptrace access denied)" },
	{ -ENOENT, "ENOENT", "no such file, region or pending operation" },
	{ -ESRCH, "ESRCH", "no such process" },
	{ -EINTR, "EINTR", "interrupted by a signal; nothing was taken" },
	{ -EIO, "EIO", "input/output error" },
	{ -ENXIO, "ENXIO", "no such device or address" },
	{ -E2BIG, "E2BIG", "too large: over a size limit (for the module: max_region_bytes)" },
	{ -EBADF, "EBADF", "bad file descriptor" },
	{ -EAGAIN, "EAGAIN", "nothing ready yet, try again" },
	{ -ENOMEM, "ENOMEM", "out of memory, or RLIMIT_MEMLOCK reached (see ulimit -l)" },
	{ -EACCES, "EACCES", "permission denied, or region lacks the access the operation needs" },
	{ -EFAULT, "EFAULT", "bad address: memory not mapped, or not writable" },
	{ -EBUSY, "EBUSY",
	  "busy: already in use (an accept of this listener is pending, an endpoint is attached, "
	  "or a region is still mapped)" },
	{ -EEXIST, "EEXIST",
	  "already there: a send of this key is still pending, the name is taken, or a world's rank "
	  "joined twice" },
	{ -ENODEV, "ENODEV", "no such device" },
	{ -EINVAL, "EINVAL",
	  "invalid argument (NULL pointer, unknown flag, bad length or reserved field)" },
	{ -EMFILE, "EMFILE", "too many open files in this process" },
	{ -ENOTTY, "ENOTTY", "not a tensorpipe command" },
	{ -ENOSPC, "ENOSPC", "limit reached (pending tensors or regions), or output buffer too small" },
	{ -EPIPE, "EPIPE", "peer closed its end of the socket" },
	{ -ERANGE, "ERANGE", "offset + length lies past the region's end" },
	{ -ENAMETOOLONG, "ENAMETOOLONG", "key too long for the rendezvous (for the module: max_key_len)" },
	{ -ENOSYS, "ENOSYS", "system call not implemented by this kernel" },
	{ -ENOLINK, "ENOLINK", "endpoint is not attached to a domain" },
	{ -EBADMSG, "EBADMSG", "unexpected message: no descriptor arrived" },
	{ -EOPNOTSUPP, "EOPNOTSUPP", "operation not supported" },
	{ -ENOBUFS, "ENOBUFS", "too many SENDs outstanding on this endpoint: read completions first" },
	{ -ECONNRESET, "ECONNRESET", "connection reset by peer" },
	{ -ETIMEDOUT, "ETIMEDOUT", "timed out" },
	{ -EALREADY, "EALREADY", "already aborted" },
	{ -EMSGSIZE, "EMSGSIZE", "tensor larger than the receive buffer; it stays for a retry" },
	{ -ECANCELED, "ECANCELED", "operation cancelled" },
	{ -ECONNREFUSED, "ECONNREFUSED", "connection refused: nothing listens at that address" },
	{ -EADDRINUSE, "EADDRINUSE", "address already in use" },
	{ -EPROTO, "EPROTO", "protocol error: the peer sent a malformed or unexpected frame" },
	{ -ENOPROTOOPT, "ENOPROTOOPT", "the two pipe ends have no transport in common" },
	{ -EPROTONOSUPPORT, "EPROTONOSUPPORT", "the peer speaks another pipe protocol version" },
	{ -ENETUNREACH, "ENETUNREACH", "network unreachable (is the interface up?)" },
};

static const struct status_text *find(tpu_status status)
{
	size_t i;

	for (i = 0; i < sizeof(status_texts) / sizeof(status_texts[0]); i++)
		if (status_texts[i].status == status)
			return &status_texts[i];
	return NULL;
}

TPU_API const char *tpu_strerror(tpu_status status)
{
	const struct status_text *t = find(status);

	if (t)
		return t->text;
	if (status < 0 && status >= -TPU_ERRNO_MAX) {
		/* Any other errno: the C library's sentence (thread-safe, never NULL). */
		const char *s = strerrordesc_np(-status);

		return s ? s : "system error (an errno number this C library does not know)";
	}
	if (status > 0)
		return "not a status: positive value";
	return "unknown status";
}

TPU_API const char *tpu_status_name(tpu_status status)
{
	const struct status_text *t = find(status);

	if (t)
		return t->name;
	if (status < 0 && status >= -TPU_ERRNO_MAX) {
		const char *s = strerrorname_np(-status);

		return s ? s : "ERRNO";
	}
	return "UNKNOWN";
}
