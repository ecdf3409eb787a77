# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""tpu_user.Agent: one-sided transfers of NumPy arrays and torch tensors.

Two agents of this process on two contexts; each backend (cma, tcp) moves
lists of slices both ways, notifications arrive in order, a WRITE to a
read-only export and a damaged blob are refused, deregistration revokes;
transfers as futures and awaited in asyncio, notifications waited for, as
futures and across close.
"""
import asyncio
import os
import time

import numpy as np
import pytest

import tpu_user


@pytest.fixture(params=["cma", "tcp"])
def pair(request):
    ca, cb = tpu_user.Context(), tpu_user.Context()
    a = tpu_user.Agent(ca, name="A", backends=request.param)
    b = tpu_user.Agent(cb, name="B", backends=request.param)
    yield request.param, a, b
    a.close()
    b.close()
    ca.close()
    cb.close()


def test_read_write_slices(pair):
    backend, a, b = pair
    src = np.arange(4096, dtype=np.float32)
    dst = np.zeros(4096, dtype=np.float32)
    rb = b.register(src, read=True, write=True)
    ra = a.register(dst)
    rm = a.load(rb.export())
    assert rm.backend == backend
    assert rm.nbytes == src.nbytes
    # Elements 100..199 and 1000..1099 of src into 0..199 of dst (bytes).
    a.read([(ra, 0, 800)], [(rm, 400, 400), (rm, 4000, 400)])
    assert np.array_equal(dst[:100], src[100:200])
    assert np.array_equal(dst[100:200], src[1000:1100])
    dst[:] = -1.0
    a.write([(ra, 0, 64)], [(rm, 64, 64)])
    assert np.all(src[16:32] == -1.0)
    assert src[15] == 15.0 and src[32] == 32.0


def test_notifications_in_order(pair):
    _, a, b = pair
    buf = np.zeros(1024, dtype=np.uint8)
    rb = b.register(buf, write=True)
    ra = a.register(np.ones(1024, dtype=np.uint8))
    rm = a.load(rb.export())
    for i in range(20):
        a.write([ra], [rm], notif=b"n%d" % i)
    got = []
    for _ in range(2000):
        got += b.notifications()
        if len(got) == 20:
            break
        import time
        time.sleep(0.005)
    assert got == [("A", b"n%d" % i) for i in range(20)]
    assert np.all(buf == 1)


def test_refusals_and_revocation(pair):
    _, a, b = pair
    ro = np.zeros(256, dtype=np.uint8)
    rb = b.register(ro, read=True, write=False)
    ra = a.register(np.full(256, 7, dtype=np.uint8))
    blob = rb.export()
    rm = a.load(blob)
    with pytest.raises(tpu_user.Error):
        a.write([ra], [rm])
    assert not ro.any()
    with pytest.raises(tpu_user.Error):
        a.read([(ra, 0, 257)], [(rm, 0, 257)])
    bad = bytearray(blob)
    bad[20] ^= 1
    with pytest.raises(tpu_user.Error):
        a.load(bytes(bad))
    rb.deregister()
    with pytest.raises(tpu_user.Error):
        a.read([ra], [rm])
    with pytest.raises(tpu_user.Error):
        a.load(blob)


def test_torch_tensors(pair):
    torch = pytest.importorskip("torch")
    _, a, b = pair
    src = torch.arange(1024, dtype=torch.int64)
    dst = torch.zeros(1024, dtype=torch.int64)
    rb = b.register(src)
    ra = a.register(dst)
    rm = a.load(rb.export())
    a.read([ra], [rm], repeat=3)
    assert torch.equal(src, dst)


def test_futures_move_slices(pair):
    _, a, b = pair
    src = np.arange(8192, dtype=np.uint8)
    dst = np.zeros(8192, dtype=np.uint8)
    rb = b.register(src, read=True, write=True)
    ra = a.register(dst)
    rm = a.load(rb.export())
    # 16 reads of 512 bytes each, in reverse order, all in flight together.
    futs = [a.read_async([(ra, i * 512, 512)], [(rm, (15 - i) * 512, 512)]) for i in range(16)]
    assert all(isinstance(f, tpu_user.Future) for f in futs)
    assert [f.result(timeout=10) for f in futs] == [None] * 16
    for i in range(16):
        assert np.array_equal(dst[i * 512:(i + 1) * 512], src[(15 - i) * 512:(16 - i) * 512])
    dst[:] = 9
    assert a.write_async([(ra, 0, 100)], [(rm, 8000, 100)], notif=b"w").result(10) is None
    assert np.all(src[8000:8100] == 9) and src[7999] == (7999 & 0xff)
    assert b.notification(timeout=10) == ("A", b"w")


def test_asyncio_awaits_transfers_and_notifications(pair):
    _, a, b = pair
    src = np.arange(4096, dtype=np.int32)
    dst = np.zeros(4096, dtype=np.int32)
    rb = b.register(src, read=True, write=True)
    ra = a.register(dst)
    rm = a.load(rb.export())

    async def main():
        got = b.notification_async()  # before anything was sent
        await asyncio.gather(*(a.read_async([(ra, i * 4096, 4096)], [(rm, i * 4096, 4096)],
                                            notif=b"%d" % i) for i in range(4)))
        first = await got
        rest = [await b.notification_async() for _ in range(3)]
        return [first] + rest

    notes = asyncio.run(asyncio.wait_for(main(), 20))
    assert np.array_equal(dst, src)
    # Per peer in the order the posts completed: every one, once.
    assert sorted(notes) == [("A", b"%d" % i) for i in range(4)]


def test_async_failures_reach_the_future(pair):
    _, a, b = pair
    buf = np.zeros(1024, dtype=np.uint8)
    rb = b.register(buf, read=True, write=False)
    ra = a.register(np.ones(1024, dtype=np.uint8))
    rm = a.load(rb.export())
    # Checked at preparation: raised at once, nothing posted.
    with pytest.raises(tpu_user.Error):
        a.write_async([ra], [rm])
    with pytest.raises(tpu_user.Error):
        a.read_async([(ra, 0, 1025)], [(rm, 0, 1025)])
    with pytest.raises(TypeError):
        a.read_async([rm], [ra])
    rb.deregister()
    deadline = time.monotonic() + 10
    with pytest.raises(tpu_user.Error):
        # Revoked: the post itself fails, through the future.
        while time.monotonic() < deadline:
            a.read_async([ra], [rm]).result(timeout=10)
            time.sleep(0.01)
    assert not buf.any()


def test_notification_wait_gives_back_its_turn(pair):
    _, a, b = pair
    buf = np.zeros(64, dtype=np.uint8)
    rb = b.register(buf, write=True)
    ra = a.register(np.ones(64, dtype=np.uint8))
    rm = a.load(rb.export())
    t0 = time.monotonic()
    with pytest.raises(tpu_user.TimeoutError):
        b.notification(timeout=0.2)
    assert 0.15 < time.monotonic() - t0 < 5
    # The waiter that timed out does not swallow the next one.
    a.write([ra], [rm], notif=b"one")
    a.write([ra], [rm], notif=b"two")
    assert b.notification(timeout=10) == ("A", b"one")
    deadline = time.monotonic() + 10
    got = []
    while not got and time.monotonic() < deadline:
        got = b.notifications()
        time.sleep(0.005)
    assert got == [("A", b"two")]


def test_close_fails_waiting_notifications():
    with tpu_user.Context() as ctx:
        a = tpu_user.Agent(ctx, name="A")
        fut = a.notification_async()
        assert not fut.done()
        a.close()
        with pytest.raises(tpu_user.Error):
            fut.result(timeout=10)
        with pytest.raises(tpu_user.Error):
            a.notification_async()


def test_close_with_transfers_in_flight(pair):
    _, a, b = pair
    src = np.ones(32 << 20, dtype=np.uint8)
    dst = np.zeros(32 << 20, dtype=np.uint8)
    rb = b.register(src)
    rm = a.load(rb.export())
    ra = a.register(dst)
    futs = [a.read_async([ra], [rm]) for _ in range(4)]
    a.close()  # releases every request first: each future ends, one way or the other
    for f in futs:
        assert f.exception(timeout=10) is None or isinstance(f.exception(),
                                                             tpu_user.CancelledError)
    assert all(f.done() for f in futs)


WORLD_AGENTS = r"""
import numpy as np, tpu_user
with tpu_user.Context() as ctx, ctx.world(timeout=60) as w:
    r, n = w.rank, w.size
    with tpu_user.Agent(ctx, name="rank%d" % r) as a:
        mine = np.full(1000, r, dtype=np.int64)
        reg = a.register(mine)
        blob = reg.export()
        blobs = w.exchange_blobs(blob)
        assert len(blobs) == n and blobs[r] == blob
        got = np.zeros(1000, dtype=np.int64)
        rg = a.register(got)
        rm = a.load(blobs[(r + 1) % n])
        a.read([rg], [rm])
        assert (got == (r + 1) % n).all(), got[:4]
        w.barrier()
        del rm
        reg.deregister()
print("rank", r, "ok", flush=True)
"""


def test_agents_swap_blobs_through_the_world():
    from test_world import start_ranks
    procs, results = start_ranks(WORLD_AGENTS, 3)
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert "ok" in out


def test_kmod_backend_named():
    """"kmod" is a backend name; use_domain wants a descriptor."""
    c = tpu_user.Context()
    a = tpu_user.Agent(c, backends="kmod,tcp")
    with pytest.raises(ValueError):
        a.use_domain(-1)
    a.close()
    with pytest.raises(ValueError):
        tpu_user.Agent(c, backends="nothing")
    c.close()


@pytest.mark.skipif(not os.path.exists("/dev/tensorpipe"),
                    reason="kmod needs the module (/dev/tensorpipe)")
def test_kmod_domain():
    """Two agents in one module domain move slices through the module."""
    fd = tpu_user.create_domain()
    ca, cb = tpu_user.Context(), tpu_user.Context()
    a = tpu_user.Agent(ca, name="A", backends="kmod", domain_fd=fd)
    b = tpu_user.Agent(cb, name="B", backends="kmod")
    b.use_domain(fd)
    with pytest.raises(tpu_user.Error):
        b.use_domain(fd)        # once only
    src = np.arange(4096, dtype=np.float32)
    dst = np.zeros(4096, dtype=np.float32)
    rb = b.register(src, read=True, write=True)
    ra = a.register(dst)
    rm = a.load(rb.export())
    assert rm.backend == "kmod"
    a.read([(ra, 0, 800)], [(rm, 400, 800)])
    assert np.array_equal(dst[:200], src[100:300])
    dst[:] = -1.0
    a.write([(ra, 0, 64)], [(rm, 64, 64)])
    assert np.all(src[16:32] == -1.0) and src[32] == 32.0
    a.close()
    b.close()
    ca.close()
    cb.close()
    os.close(fd)
