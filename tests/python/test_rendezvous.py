# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""The rendezvous: across processes, timeouts, cancel, abort, close, fork, asyncio."""
import asyncio
import errno
import os
import sys
import threading
import time

import numpy as np
import pytest

import tpu_user
from conftest import spawn

# A child that joins the parent's rendezvous and sends what argv asks.
SENDER = r'''
import os, sys, numpy as np, tpu_user
ctx = tpu_user.Context()
r = ctx.join(int(sys.argv[1]))
n, mode = int(sys.argv[2]), sys.argv[3]
a = np.arange(n, dtype=np.float32)
if mode == "die":
    r.send_async("x", a)
    os._exit(3)
r.send("x", a, timeout=30)
if mode == "echo":
    back = r.recv("y", timeout=30)
    assert np.array_equal(np.asarray(back), a * 2)
ctx.close()
'''


@pytest.fixture
def shared(ctx):
    r = ctx.rendezvous()
    if r.impl == "inprocess":
        pytest.skip("no cross-process rendezvous here")
    fd = r.share()
    yield r, fd
    os.close(fd)
    r.close()


@pytest.mark.parametrize("n", [0, 3, 1 << 18, 16 << 20])
def test_cross_process(shared, n):
    r, fd = shared
    p = spawn(SENDER, fd, n, "echo", pass_fds=[fd])
    t = r.recv("x", timeout=30)
    a = np.asarray(t)
    assert a.dtype == np.float32 and a.shape == (n,)
    assert np.array_equal(a, np.arange(n, dtype=np.float32))
    r.send("y", a * 2, timeout=30)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err


def test_cross_process_recv_into(shared):
    r, fd = shared
    n = 1 << 20
    p = spawn(SENDER, fd, n, "once", pass_fds=[fd])
    out = np.empty(n, dtype=np.float32)
    r.recv_into("x", out, timeout=30)
    assert out[n - 1] == n - 1
    assert p.wait(30) == 0


def test_producer_death_does_not_hang(shared):
    r, fd = shared
    p = spawn(SENDER, fd, 1 << 20, "die", pass_fds=[fd])
    assert p.wait(30) == 3
    t0 = time.monotonic()
    with pytest.raises((tpu_user.PeerGoneError, tpu_user.TimeoutError)):
        r.recv("x", timeout=2)
    assert time.monotonic() - t0 < 10


def test_timeouts(rdv):
    t0 = time.monotonic()
    with pytest.raises(tpu_user.TimeoutError) as e:
        rdv.recv("none", timeout=0.2)
    assert 0.15 < time.monotonic() - t0 < 5
    assert isinstance(e.value, TimeoutError)		# the built-in one too
    assert e.value.errno == errno.ETIMEDOUT and e.value.status_name == "ETIMEDOUT"
    with pytest.raises(TimeoutError):
        rdv.send("nobody", np.zeros(100000), timeout=0.2)
    # The timed-out send was withdrawn: the key can be sent again.
    fut = rdv.send_async("nobody", np.ones(100000))
    assert np.asarray(rdv.recv("nobody", timeout=5))[0] == 1
    fut.result(5)
    with pytest.raises(TimeoutError):
        rdv.recv_async("late", timeout=0.1).result(5)


def test_cancel(rdv):
    fut = rdv.recv_async("k")
    assert rdv.cancel("k") is True
    with pytest.raises(tpu_user.CancelledError):
        fut.result(5)
    assert rdv.cancel("k") is False


def test_abort(ctx):
    r = ctx.rendezvous("inprocess")
    fut = r.recv_async("k")
    r.abort(errno.ECONNABORTED)
    with pytest.raises(tpu_user.ConnectionError) as e:
        fut.result(5)
    assert e.value.errno == errno.ECONNABORTED
    with pytest.raises(tpu_user.Error):
        r.send("later", np.zeros(1), timeout=1)
    with pytest.raises(ValueError):
        r.abort(0)
    r.close()


def test_close_fails_pending(ctx):
    r = ctx.rendezvous("inprocess")
    fut = r.recv_async("k")
    r.close()
    with pytest.raises(tpu_user.ClosedError):
        fut.result(5)
    with pytest.raises(tpu_user.ClosedError):
        r.recv("k", timeout=1)


def test_context_close_fails_pending():
    ctx = tpu_user.Context()
    r = ctx.rendezvous("inprocess")
    futs = [r.recv_async(f"k{i}") for i in range(10)]
    ctx.close()
    for f in futs:
        with pytest.raises(tpu_user.ClosedError):
            f.result(5)
    with pytest.raises(tpu_user.ClosedError):
        r.recv("k", timeout=1)


def test_blocking_calls_release_the_gil(rdv):
    # The receiver blocks in C; this thread must still run Python meanwhile.
    got = {}
    th = threading.Thread(target=lambda: got.setdefault("t", rdv.recv("k", timeout=10)))
    th.start()
    ticks = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.3:
        ticks += 1
    rdv.send("k", np.arange(5, dtype=np.int64), timeout=10)
    th.join(10)
    assert ticks > 1000
    assert np.asarray(got["t"]).tolist() == [0, 1, 2, 3, 4]


def test_futures_resolve_on_a_python_thread(rdv):
    seen = []
    fut = rdv.recv_async("k")
    fut.add_done_callback(lambda f: seen.append(threading.current_thread().name))
    rdv.send_async("k", np.zeros(3))
    fut.result(5)
    time.sleep(0.05)
    assert seen and seen[0] in ("tpu_user-completions", threading.current_thread().name)


def test_asyncio(rdv):
    async def main():
        recv = rdv.recv_async("k", timeout=5)
        send = rdv.send_async("k", np.arange(100000, dtype=np.int32))
        t, _ = await asyncio.gather(recv, send)
        return np.asarray(t)

    a = asyncio.run(main())
    assert a[99999] == 99999


def test_many_threads(rdv):
    n = 200
    out = [None] * n

    def consumer(i):
        out[i] = np.asarray(rdv.recv(f"k{i}", timeout=20))

    threads = [threading.Thread(target=consumer, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    futs = [rdv.send_async(f"k{i}", np.full(i + 1, i, dtype=np.int32)) for i in range(n)]
    for th in threads:
        th.join(30)
    for f in futs:
        f.result(5)
    for i in range(n):
        assert out[i].tolist() == [i] * (i + 1)


def test_keys():
    src = "/job:a/replica:0/task:0/device:CPU:0"
    dst = "/job:a/replica:0/task:1/device:CPU:0"
    k = tpu_user.make_key(src, 7, dst, "edge", 2, 3)
    assert k == f"{src};0000000000000007;{dst};edge;2:3"
    parts = tpu_user.parse_key(k)
    assert parts == dict(src_device=src, src_incarnation=7, dst_device=dst, edge_name="edge",
                         frame_id=2, iter_id=3)
    with pytest.raises(ValueError):
        tpu_user.make_key("not a device", 1, dst, "e")
    with pytest.raises(ValueError):
        tpu_user.make_key(src, 1, dst, "semi;colon")
    with pytest.raises(ValueError):
        tpu_user.parse_key("a;b")


def test_fork_child_gets_an_exception(rdv):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            rdv.recv("k", timeout=1)
        except tpu_user.ForkedError:
            code = 0
        except BaseException:
            code = 2
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    res = os.read(r, 1)
    os.close(r)
    assert res == b"\0", f"child said {res!r}"
    # The parent's objects still work.
    fut = rdv.send_async("k", np.ones(2))
    rdv.recv("k", timeout=5)
    fut.result(5)


REMOTE_CHILD = r'''
import os, sys, numpy as np, tpu_user
T0, T1 = "/job:w/replica:0/task:0", "/job:w/replica:0/task:1"
ctx = tpu_user.Context()
r = ctx.remote_rendezvous(T1, {T0: sys.argv[1]}, listen_urls=["tcp://127.0.0.1:0"])
print(r.url(), flush=True)
k = tpu_user.make_key(T1 + "/device:CPU:0", 1, T0 + "/device:CPU:0", "a")
r.send_async(k, np.arange(10, dtype=np.int32))
k2 = tpu_user.make_key(T0 + "/device:CPU:0", 1, T1 + "/device:CPU:0", "ack")
r.recv(k2, timeout=30)
os._exit(0)      # dies without closing anything
'''


def test_remote_rendezvous_and_peer_death(ctx):
    T0, T1 = "/job:w/replica:0/task:0", "/job:w/replica:0/task:1"
    r = ctx.remote_rendezvous(T0, listen_urls=["tcp://127.0.0.1:0"])
    assert r.impl == "remote"
    p = spawn(REMOTE_CHILD, r.url())
    r.add_peer(T1, p.stdout.readline().strip())
    k = tpu_user.make_key(T1 + "/device:CPU:0", 1, T0 + "/device:CPU:0", "a")
    assert np.asarray(r.recv(k, timeout=30)).tolist() == list(range(10))
    r.send(tpu_user.make_key(T0 + "/device:CPU:0", 1, T1 + "/device:CPU:0", "ack"),
           np.zeros(1), timeout=30)
    assert p.wait(30) == 0
    with pytest.raises(tpu_user.PeerGoneError) as e:
        r.recv(tpu_user.make_key(T1 + "/device:CPU:0", 1, T0 + "/device:CPU:0", "b"),
               timeout=20)
    assert isinstance(e.value, ConnectionError)
    assert e.value.status_name == "TPU_E_PEER_GONE"
    r.close()



def test_no_leak_of_ops_and_futures(rdv):
    import gc
    import weakref

    def one():
        a = np.zeros(1000)
        ref = weakref.ref(a)
        fut = rdv.send_async("k", a)
        got = rdv.recv_async("k", timeout=5)
        got.result(5)
        fut.result(5)
        return ref, weakref.ref(fut), weakref.ref(got)

    refs = [one() for _ in range(20)]
    time.sleep(0.1)
    gc.collect()
    assert all(r() is None for trio in refs for r in trio), "ops, futures or sources leaked"


def test_fork_child_exits_cleanly_with_inherited_objects(ctx):
    import multiprocessing
    r = ctx.rendezvous("inprocess")
    fut = r.recv_async("pending")		# something in flight in the parent

    def child():
        try:
            r.send("x", np.zeros(1), timeout=1)
        except tpu_user.ForkedError:
            pass
        # falls off the end: the interpreter tears the inherited objects down

    p = multiprocessing.get_context("fork").Process(target=child)
    p.start()
    p.join(30)
    assert p.exitcode == 0
    r.cancel("pending")
    with pytest.raises(tpu_user.CancelledError):
        fut.result(5)
    r.close()


def test_library_log_goes_to_python_logging(caplog):
    import logging
    with caplog.at_level(logging.DEBUG, logger="tpu_user"):
        with tpu_user.Context() as c:
            r = c.rendezvous("inprocess")
            r.close()
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "tpu_user"]
    assert any(m.startswith("library: ") and "inprocess" in m for m in lines), lines
    tpu_user.log_library(False)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tpu_user"):
        with tpu_user.Context() as c:
            c.rendezvous("inprocess").close()
    assert not [r for r in caplog.records if r.getMessage().startswith("library: ")]


def _wakeups(skip=()):
    """Voluntary context switches of this process's threads (tid -> count), skipping some."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        if int(tid) in skip:
            continue
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        out[int(tid)] = int(line.split()[1])
        except OSError:
            pass		# a thread that just ended
    return out


def _woken(before, after):
    return sum(n - before.get(tid, 0) for tid, n in after.items())


# Sends "hello", N tensors too large to ride inline, then waits for "bye".
STREAMER = r'''
import sys, numpy as np, tpu_user
ctx = tpu_user.Context()
r = ctx.join(int(sys.argv[1]))
n, size = int(sys.argv[2]), int(sys.argv[3])
r.send("hello", np.zeros(1), timeout=30)
a = np.arange(size, dtype=np.float32)
for i in range(n):
    r.send(f"t{i}", a, timeout=30)
r.recv("bye", timeout=30)
ctx.close()
'''


def test_large_recv_into_wakes_no_other_thread(ctx):
    # On one host a large recv_into takes the header and then the bytes on
    # the caller's thread: the transfer wakes none of this process's other
    # threads (it woke the cma helper and the context's thread per tensor
    # when the header's receive was posted asynchronously).
    try:
        r = ctx.rendezvous("cma")
    except tpu_user.Error as e:
        pytest.skip(f"no cma rendezvous here: {e}")
    fd = r.share()
    n, size = 40, 1 << 16
    p = spawn(STREAMER, fd, n, size, pass_fds=[fd])
    try:
        r.recv("hello", timeout=30)		# the child joined and posted
        me = threading.get_native_id()
        out = np.zeros(size, dtype=np.float32)
        before = _wakeups(skip={me})
        for i in range(n):
            r.recv_into(f"t{i}", out, timeout=30)
        after = _wakeups(skip={me})
        assert out[size - 1] == size - 1
        r.send("bye", np.zeros(1), timeout=30)
        assert p.wait(30) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
        os.close(fd)
        r.close()
    assert _woken(before, after) < n // 4, (before, after)


def test_waited_future_does_not_wake_the_dispatcher(rdv):
    # An op whose future a thread waits on (result()) wakes that thread
    # only, which settles it: the futures' dispatcher thread sleeps on.
    n = 20
    rdv.send_async("warm", np.zeros(1))
    rdv.recv("warm", timeout=5)		# the dispatcher exists now
    disp = rdv._ctx._dispatcher.native_id
    before = _wakeups()
    for i in range(n):
        fut = rdv.recv_async(f"k{i}", timeout=5)
        th = threading.Timer(0.01, rdv.send, args=(f"k{i}", np.full(2000, i)))
        th.start()
        assert np.asarray(fut.result(5))[1999] == i
        th.join(5)
    after = _wakeups()
    assert after.get(disp, 0) - before.get(disp, 0) < n // 2, (before, after)


@pytest.mark.parametrize("sent", [np.arange(50000, dtype=np.float32),	# fits
                                  np.arange(10, dtype=np.float32),	# came inline
                                  np.arange(60000, dtype=np.float32)],	# larger
                         ids=["fits", "inline", "larger"])
def test_remote_recv_into(sent):
    # The remote rendezvous keeps the header's receive posted beside the
    # bytes' (no network round trip between them); a mismatch still fails
    # EMSGSIZE, drops what came, and the key works again.
    T0, T1 = "/job:v/replica:0/task:0", "/job:v/replica:0/task:1"
    k = tpu_user.make_key(T1 + "/device:CPU:0", 1, T0 + "/device:CPU:0", "x")
    with tpu_user.Context() as c0, tpu_user.Context() as c1:
        r0 = c0.remote_rendezvous(T0, listen_urls=["tcp://127.0.0.1:0"])
        r1 = c1.remote_rendezvous(T1, {T0: r0.url()}, listen_urls=["tcp://127.0.0.1:0"])
        r0.add_peer(T1, r1.url())
        out = np.zeros(50000, dtype=np.float32)
        fut = r1.send_async(k, sent)
        if sent.nbytes == out.nbytes:
            r0.recv_into(k, out, timeout=20)
            assert np.array_equal(out, sent)
        else:
            with pytest.raises(tpu_user.Error) as e:
                r0.recv_into(k, out, timeout=20)
            assert e.value.status_name == "EMSGSIZE"
        fut.result(20)
        fut = r1.send_async(k, np.ones(3))
        assert np.asarray(r0.recv(k, timeout=20)).tolist() == [1, 1, 1]
        fut.result(20)
        r0.close()
        r1.close()
