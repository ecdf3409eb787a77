# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Pipes: messages of several tensors, metadata and payloads; in and across processes."""
import asyncio
import os
import select
import threading
import time

import numpy as np
import pytest

import tpu_user
from conftest import spawn


@pytest.fixture(params=["tcp://127.0.0.1:0", "shm"])
def pair(ctx, request):
    urls = [request.param] if request.param.startswith("tcp") else None
    lst = ctx.listen(urls)
    acc = lst.accept_async()
    url = lst.url("tcp" if request.param.startswith("tcp") else "shm")
    a = ctx.connect(url)
    b = acc.result(10)
    yield a, b
    a.close()
    b.close()
    lst.close()


def test_message_roundtrip(pair):
    a, b = pair
    tensors = [np.arange(12, dtype=np.float32).reshape(3, 4), np.zeros((0, 2), np.int8),
               np.arange(1 << 20, dtype=np.int64), np.array(True)]
    # A large tensor's write completes once the reader took it: write_async first.
    fut = a.write_async(tensors, metadata=b"meta", payloads=[b"p1", bytearray(b"")])
    msg = b.read(timeout=10)
    fut.result(10)
    assert msg.metadata == b"meta"
    assert msg.payloads == [b"p1", b""]
    assert len(msg.tensors) == 4
    for x, t in zip(tensors, msg.tensors):
        assert t.dtype == str(x.dtype) and t.shape == x.shape
        assert np.array_equal(np.asarray(t), x)


def test_read_into(pair):
    a, b = pair
    src = [np.random.rand(256, 256), np.arange(10, dtype=np.uint16)]
    out = [np.empty_like(x) for x in src]
    fut = a.write_async(src, b"x")
    msg = b.read_into(out, timeout=10)
    fut.result(10)
    assert msg.tensors[0] is out[0] and msg.tensors[1] is out[1]
    assert all(np.array_equal(x, y) for x, y in zip(src, out))


def test_read_into_mismatch(pair):
    a, b = pair
    a.write_async([np.zeros(100, np.float32)])
    with pytest.raises(tpu_user.Error) as e:
        b.read_into([np.zeros(100, np.float64)], timeout=10)
    assert e.value.status_name == "EMSGSIZE"
    a.write_async([np.zeros(1)], b"next")
    assert b.read(timeout=10).metadata == b"next"	# the pipe goes on


def test_order_and_async(pair):
    a, b = pair
    futs = [a.write_async([np.full(1000, i)], str(i).encode()) for i in range(50)]
    reads = [b.read_async() for _ in range(50)]
    for i, f in enumerate(reads):
        msg = f.result(10)
        assert msg.metadata == str(i).encode()
        assert np.asarray(msg.tensors[0])[999] == i
    for f in futs:
        f.result(10)


def test_read_timeout_then_message(pair):
    a, b = pair
    with pytest.raises(tpu_user.TimeoutError):
        b.read(timeout=0.2)
    a.write([np.ones(3)], b"late", timeout=10)
    assert b.read(timeout=10).metadata == b"late"


def test_bad_input(pair):
    a, b = pair
    with pytest.raises(TypeError):
        a.write([object()])
    with pytest.raises(ValueError):
        a.write([np.zeros((4, 4))[:, 1]])
    with pytest.raises(ValueError):
        a.write([], metadata=b"x" * (128 << 10))
    with pytest.raises(tpu_user.Error):
        tpu_user.Context().connect("nope://where")


def test_close_fails_pending(ctx):
    lst = ctx.listen(["tcp://127.0.0.1:0"])
    acc = lst.accept_async()
    a = ctx.connect(lst.url())
    b = acc.result(10)
    fut = b.read_async()
    a.close()
    with pytest.raises(tpu_user.Error):
        fut.result(10)
    b.close()
    with pytest.raises(tpu_user.ClosedError):
        b.read(timeout=1)
    lst.close()


SERVER = r'''
import os, sys, numpy as np, tpu_user
ctx = tpu_user.Context()
lst = ctx.listen(["tcp://127.0.0.1:0"])
print(lst.url(), flush=True)
p = lst.accept(timeout=30)
msg = p.read(timeout=30)
if sys.argv[1] == "die":
    os._exit(4)
p.write([np.asarray(t) * 2 for t in msg.tensors], msg.metadata, timeout=30)
p.read(timeout=30)   # until the client closes
'''


def test_cross_process_echo(ctx):
    srv = spawn(SERVER, "echo")
    p = ctx.connect(srv.stdout.readline().strip())
    x = np.arange(4 << 20, dtype=np.float32)
    p.write([x, np.arange(5)], b"echo", timeout=30)
    msg = p.read(timeout=30)
    assert msg.metadata == b"echo"
    assert np.array_equal(np.asarray(msg.tensors[0]), x * 2)
    assert p.transport() in ("tcp", "shm") and p.channel()
    p.close()
    srv.wait(30)


def test_peer_death(ctx):
    srv = spawn(SERVER, "die")
    p = ctx.connect(srv.stdout.readline().strip())
    p.write([np.zeros(10)], timeout=30)
    assert srv.wait(30) == 4
    t0 = time.monotonic()
    with pytest.raises(tpu_user.ConnectionError) as e:
        p.read(timeout=20)
    assert isinstance(e.value, ConnectionError)
    assert time.monotonic() - t0 < 10
    p.close()


def test_accept_timeout(ctx):
    lst = ctx.listen(["tcp://127.0.0.1:0"])
    with pytest.raises(TimeoutError):
        lst.accept(timeout=0.2)
    lst.close()


def test_job_secret():
    """Same secret: a pipe opens; another secret: the connect's pipe fails EACCES."""
    with tpu_user.Context(transports="tcp") as lc, tpu_user.Context(transports="tcp") as good, \
            tpu_user.Context(transports="tcp") as bad:
        lc.set_secret(b"alpha")
        good.set_secret("alpha")
        bad.set_secret(b"beta")
        lst = lc.listen(["tcp://127.0.0.1:0"])
        acc = lst.accept_async()
        url = lst.url("tcp")
        p = bad.connect(url)
        with pytest.raises(tpu_user.Error) as e:
            p.write_async([np.zeros(4, np.uint8)]).result(10)
        assert e.value.status_name == "EACCES"
        p.close()
        a = good.connect(url)
        b = acc.result(10)
        a.write_async([np.arange(4, dtype=np.uint8)], b"ok").result(10)
        assert b.read(timeout=10).metadata == b"ok"
        a.close()
        b.close()
        lst.close()
        with pytest.raises(tpu_user.Error):
            good.set_secret(b"x" * 4097)


def _dispatchers():
    return [t for t in threading.enumerate() if t.name == "tpu_user-completions"]


def test_asyncio_reader_no_thread(pair):
    """aread/awrite settle on the loop's thread through its reader of the
    context's descriptor: no completion thread is started, and a message
    read_into the caller's tensors lands there."""
    a, b = pair
    before = len(_dispatchers())
    src = [np.arange(4096, dtype=np.float32), np.arange(7, dtype=np.int16)]
    out = [np.empty_like(x) for x in src]

    async def main():
        loop_tid = threading.get_ident()
        seen = []
        for i in range(20):
            r = asyncio.ensure_future(b.aread(out))
            await a.awrite(src, str(i).encode())
            msg = await asyncio.wait_for(r, 10)
            seen.append((msg.metadata, threading.get_ident() == loop_tid))
            assert msg.tensors[0] is out[0] and np.array_equal(out[1], src[1])
        # And back the other way, with fresh tensors.
        w = asyncio.ensure_future(b.awrite([np.full(3, 5.0)], b"back"))
        msg = await asyncio.wait_for(a.aread(), 10)
        await w
        return seen, msg

    seen, msg = asyncio.run(main())
    assert [m for m, _ in seen] == [str(i).encode() for i in range(20)]
    assert all(on_loop for _, on_loop in seen)
    assert msg.metadata == b"back" and np.array_equal(np.asarray(msg.tensors[0]), np.full(3, 5.0))
    assert len(_dispatchers()) == before


def test_asyncio_many_pending(pair):
    """Many reads awaited at once, completing in a burst: none is lost between
    the loop's drains of the queue and of its descriptor."""
    a, b = pair

    async def main():
        reads = [asyncio.ensure_future(b.aread()) for _ in range(200)]
        await asyncio.sleep(0)
        for i in range(200):
            a.write_async([np.full(8, i, np.int32)], str(i).encode())
        return await asyncio.wait_for(asyncio.gather(*reads), 20)

    msgs = asyncio.run(main())
    assert [m.metadata for m in msgs] == [str(i).encode() for i in range(200)]


def test_fileno_readable_after_completion():
    """fileno(): readable for operations that finished before it was first
    asked for (completions write the descriptor only once someone polls it),
    and for later ones."""
    with tpu_user.Context(transports="shm") as c:
        lst = c.listen()
        acc = lst._c._accept_op()
        a = c.connect(lst.url("shm"))
        assert acc._wait(10)
        ok, b = acc._outcome()
        assert ok
        w = a._c._write_op([np.zeros(4, np.uint8)], b"z", [])
        assert w._wait(10)  # waits without draining the queue
        fd = c.fileno()
        assert select.select([fd], [], [], 5)[0] == [fd]
        assert len(c._c._drain(0)) >= 2
        assert select.select([fd], [], [], 0)[0] == []
        w = a._c._write_op([np.zeros(4, np.uint8)], b"y", [])
        assert w._wait(10)
        assert select.select([fd], [], [], 5)[0] == [fd]
        c._c._drain(0)
        a.close()
        b.close()
        lst.close()
