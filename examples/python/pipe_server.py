#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""A pipe server that answers each message of tensors with their sums.

    python3 examples/python/pipe_server.py                  server and a client (forked)
    python3 examples/python/pipe_server.py serve tcp://127.0.0.1:5000   (or default:
                                                  loopback tcp and shm, any port)
    python3 examples/python/pipe_server.py client tcp://127.0.0.1:5000

The client writes messages of a few tensors with metadata; the server
answers each with one float64 tensor holding every tensor's sum and echoes
the metadata; an empty message ends the session.  Between two processes of
one machine the pipe moves to shared memory, when the server listens on shm
too, and to the kmod or cma channel.
"""
import subprocess
import sys

import numpy as np

import tpu_user


def serve(url: str, once: bool) -> int:
    # "default": loopback tcp and shm, so that a local client moves to shm.
    urls = None if url == "default" else [url]
    with tpu_user.Context() as ctx, ctx.listen(urls) as listener:
        print(listener.url("tcp"), flush=True)
        while True:
            with listener.accept() as pipe:
                while True:
                    msg = pipe.read()
                    if not msg.tensors:
                        break
                    sums = np.array([np.asarray(t).sum(dtype=np.float64) for t in msg.tensors])
                    pipe.write([sums], metadata=msg.metadata)
            if once:
                return 0


def client(url: str) -> int:
    ok = True
    with tpu_user.Context() as ctx, ctx.connect(url) as pipe:
        for i in range(5):
            tensors = [np.full((512, 512), i, np.float32), np.arange(1000, dtype=np.int64)]
            # Write and read at once: a large tensor's write completes once it was read.
            done = pipe.write_async(tensors, metadata=f"request {i}".encode())
            msg = pipe.read(timeout=30)
            done.result(30)
            sums = np.asarray(msg.tensors[0])
            want = [512 * 512 * i, 999 * 1000 // 2]
            ok &= sums.tolist() == want and msg.metadata == f"request {i}".encode()
            print(f"{msg.metadata.decode()}: sums {sums.tolist()} via {pipe.transport()}/"
                  f"{pipe.channel()}")
        pipe.write([], metadata=b"bye", timeout=30)
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("serve", "serve-once"):
        sys.exit(serve(sys.argv[2], once=sys.argv[1] == "serve-once"))
    if len(sys.argv) == 3 and sys.argv[1] == "client":
        sys.exit(client(sys.argv[2]))
    server = subprocess.Popen([sys.executable, __file__, "serve-once", "default"],
                              stdout=subprocess.PIPE, text=True)
    url = server.stdout.readline().strip()
    rc = client(url)
    sys.exit(rc or server.wait(30))
