# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""The library's one-call world collectives from Python: reduce_scatter,
send/recv by rank, the barrier with a timeout and the device names, ranks
started with torchrun's variables; every element checked."""
import pytest

from test_world import start_ranks

WORKER = r'''
import sys, time, numpy as np, tpu_user
with tpu_user.Context() as ctx, ctx.world(timeout=60) as w:
    r, n = w.rank, w.size
    assert w.device_name(r) == f"/job:worker/replica:0/task:{r}/device:CPU:0"
    for dt in ("float32", "int64", "float64"):
        x = (np.arange(101) + r).astype(dt)
        part = np.asarray(w.reduce_scatter(x, timeout=30))
        total = sum((np.arange(101) + k).astype(dt) for k in range(n))
        sizes = [101 // n + (1 if k < 101 % n else 0) for k in range(n)]
        off = sum(sizes[:r])
        assert part.dtype == np.dtype(dt) and part.shape == (sizes[r],), (dt, part.shape)
        assert (part == total[off:off + sizes[r]]).all(), (dt, part[:4])
    part = np.asarray(w.reduce_scatter(np.full(n * 4, float(r), dtype=np.float32), op="mean"))
    assert (part == (n - 1) / 2).all()
    # Around the ring by rank: rank 0 sends first, the others receive first.
    nxt, prv = (r + 1) % n, (r - 1) % n
    got = np.zeros(64, dtype=np.int32)
    if r != 0:
        assert w.recv(got, prv, timeout=30) == 64 * 4
        assert (got == np.arange(64) * (prv + 1)).all()
    w.send(np.arange(64, dtype=np.int32) * (r + 1), nxt, timeout=30)
    if r == 0:
        assert w.recv(got, prv, timeout=30) == 64 * 4
        assert (got == np.arange(64) * (prv + 1)).all()
    # Nothing sent: the receive times out within its bound and consumes nothing.
    t0 = time.monotonic()
    try:
        w.recv(got, prv, timeout=0.3)
    except tpu_user.TimeoutError:
        pass
    else:
        raise AssertionError("recv without a send returned")
    assert 0.25 < time.monotonic() - t0 < 5
    # A reduce-scatter whose count differs on the last rank fails on every rank,
    # saying so; over the rendezvous the world goes on, over the shared
    # segment every later collective fails with the same reason.
    try:
        w.reduce_scatter(np.ones(12 if r == n - 1 else 13, dtype=np.float32), timeout=30)
    except tpu_user.Error as e:
        assert "count" in str(e), str(e)
    else:
        raise AssertionError("mismatched reduce_scatter passed")
    if w.coll_path() == "shm":
        try:
            w.barrier(timeout=30)
        except tpu_user.Error as e:
            assert e.status_name == "TPU_E_COLL_MISMATCH" and "count" in str(e), str(e)
        else:
            raise AssertionError("the segment went on after a mismatch")
        print("rank", r, "ok", flush=True)
        sys.exit(0)
    w.barrier(timeout=30)
    part = np.asarray(w.reduce_scatter(np.ones(n, dtype=np.float32), timeout=30))
    assert (part == n).all()
print("rank", r, "ok", flush=True)
'''


@pytest.mark.parametrize("path", ["auto", "rdv"])
@pytest.mark.parametrize("n", [2, 3])
def test_world_one_call_collectives(n, path, monkeypatch):
    # auto: the shared segment (one host); rdv: the rendezvous, where the
    # world goes on after a mismatch.
    monkeypatch.setenv("TPU_COLL_PATH", path)
    procs, results = start_ranks(WORKER, n)
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert "ok" in out
