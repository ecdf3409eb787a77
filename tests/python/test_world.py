# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""World and collectives, ranks started with torchrun's variables."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tpu_user
from conftest import TOP, child_env, spawn

WORKER = r'''
import sys, numpy as np, tpu_user
with tpu_user.Context() as ctx, ctx.world(timeout=60) as w:
    r, n = w.rank, w.size
    for dt in ("float32", "float64", "int32", "int64", "uint8", "float16"):
        x = np.full(1000, r + 1, dtype=dt)
        w.all_reduce(x)
        assert (x == n * (n + 1) // 2).all(), (dt, x[:4])
    x = np.arange(10, dtype=np.float64) * (r + 1)
    w.all_reduce(x, op="max")
    assert (x == np.arange(10) * n).all()
    x = np.full(3, float(r))
    w.all_reduce(x, op="min")
    assert (x == 0).all()
    big = np.full(4 << 20, 1.0, dtype=np.float32)
    w.all_reduce(big)
    assert big[123456] == n
    b = np.full(7, r, dtype=np.int64)
    w.broadcast(b, src=1)
    assert (b == 1).all()
    g = np.asarray(w.all_gather(np.array([r, 2 * r], dtype=np.int32)))
    assert g.shape == (n, 2) and g[:, 1].tolist() == [2 * i for i in range(n)]
    try:
        w.all_reduce(np.zeros(3, dtype=np.complex64))
    except TypeError:
        pass
    else:
        raise AssertionError("complex all_reduce accepted")
    try:
        w.all_reduce(np.zeros(3), op="median")
    except ValueError:
        pass
    else:
        raise AssertionError("unknown op accepted")
    # A rendezvous and a pipe of the world.
    rdv = w.rendezvous()
    nxt, prv = (r + 1) % n, (r - 1) % n
    key = lambda a, b: tpu_user.make_key(f"/job:worker/replica:0/task:{a}/device:CPU:0", 1,
                                         f"/job:worker/replica:0/task:{b}/device:CPU:0", "ring")
    f = rdv.send_async(key(r, nxt), np.full(5, r))
    got = np.asarray(rdv.recv(key(prv, r), timeout=30))
    assert (got == prv).all()
    f.result(30)
    w.barrier()
print("rank", r, "ok", flush=True)
'''


IN_USE = "address already in use"


def start_ranks(code, n, *args):
    from examples_helper import free_port
    # The port was free when picked; another program may take it before rank 0
    # binds it (the machine is shared): try again with another then.
    for _ in range(3):
        port = free_port()
        procs = [spawn(code, *args, env=child_env(RANK=r, WORLD_SIZE=n, LOCAL_RANK=r,
                                                    LOCAL_WORLD_SIZE=n, MASTER_ADDR="127.0.0.1",
                                                    MASTER_PORT=port))
                 for r in range(n)]
        results = [p.communicate(timeout=180) for p in procs]
        if not any(IN_USE in err for _, err in results):
            break
    return procs, results


@pytest.mark.parametrize("n", [2, 3])
def test_collectives(n):
    procs, results = start_ranks(WORKER, n)
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert "ok" in out


def test_example_all_reduce():
    # The example launches its ranks itself, with torchrun's variables.
    for _ in range(3):	# see start_ranks()
        p = subprocess.run([sys.executable, os.path.join(TOP, "examples", "python",
                                                         "all_reduce.py"), "3"],
                           env=child_env(), capture_output=True, text=True, timeout=180)
        if IN_USE not in p.stderr:
            break
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("as expected") == 3


def test_world_without_launcher(ctx, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE", "TPU_STORE_ADDR"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(tpu_user.Error) as e:
        ctx.world(timeout=1)
    assert e.value.status_name == "ENOENT"


def test_world_bad_rank(ctx, monkeypatch):
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.raises(tpu_user.Error) as e:
        ctx.world(timeout=1)
    assert e.value.errno is not None


MISMATCH = r'''
import sys, time, numpy as np, tpu_user
with tpu_user.Context() as ctx, ctx.world(timeout=60) as w:
    r, n = w.rank, w.size
    x = np.ones(4, dtype=np.float32)
    w.all_reduce(x, timeout=20)
    assert (x == n).all()

    def mismatched(call, what):
        t0 = time.monotonic()
        try:
            call()
        except tpu_user.Error as e:
            took = time.monotonic() - t0
            assert e.status_name == "TPU_E_COLL_MISMATCH", e
            assert what in str(e), (what, str(e))
            assert took < 10, took  # promptly, not at the 20 s timeout
        else:
            raise AssertionError("a mismatch was not reported: " + what)

    # Rank 1 passes more elements than the previous instance, the others as before.
    mismatched(lambda: w.all_reduce(np.ones(8 if r == 1 else 4, dtype=np.float32),
                                    timeout=20), "element count")
    if w.coll_path() == "shm":
        # The shared segment stays failed (a broadcast's root may have returned
        # early): every later collective raises the first mismatch again.
        mismatched(lambda: w.all_reduce(np.ones(4, dtype=np.float32), timeout=20),
                   "element count")
        print("rank", r, "ok", flush=True)
        sys.exit(0)
    # Another dtype on rank 0 only.
    mismatched(lambda: w.all_reduce(np.ones(4, dtype=np.int32 if r == 0 else np.float32),
                                    timeout=20), "data type")
    # Another op, another collective.
    mismatched(lambda: w.all_reduce(np.ones(4, dtype=np.float32),
                                    op="max" if r == 1 else "sum", timeout=20), "merge op")
    mismatched(lambda: (w.broadcast(np.ones(4), timeout=20) if r == 0 else
                        w.all_gather(np.ones(4), timeout=20)), "collective type")
    # The world still works, with the same and with new sizes.
    x = np.ones(4, dtype=np.float32)
    w.all_reduce(x, timeout=20)
    assert (x == n).all()
    y = np.full(16, r, dtype=np.int64)
    w.all_reduce(y, op="max", timeout=20)
    assert (y == n - 1).all()
    w.barrier()
print("rank", r, "ok", flush=True)
'''


@pytest.mark.parametrize("path", ["rdv", "auto"])
@pytest.mark.parametrize("n", [2, 3])
def test_collective_mismatch_is_reported_on_every_rank(n, path, monkeypatch):
    # Over the rendezvous the world's collectives go on after a mismatch;
    # over the shared segment (auto, one host) every later one fails with it.
    monkeypatch.setenv("TPU_COLL_PATH", path)
    procs, results = start_ranks(MISMATCH, n)
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert "ok" in out


TIMEOUT = r'''
import sys, time, numpy as np, tpu_user
with tpu_user.Context() as ctx, ctx.world(timeout=30) as w:
    if w.rank == 0:
        t0 = time.monotonic()
        try:
            w.all_reduce(np.ones(4), timeout=0.5)
        except tpu_user.TimeoutError:
            assert time.monotonic() - t0 < 3
        else:
            raise AssertionError("no timeout")
    w.barrier()
print("rank", w.rank, "ok", flush=True)
'''


def test_collective_timeout_argument():
    procs, results = start_ranks(TIMEOUT, 2)
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert "ok" in out


PATH_WORKER = r'''
import os, sys, numpy as np, tpu_user
want = sys.argv[1]
with tpu_user.Context() as ctx, ctx.world(timeout=60) as w:
    r, n = w.rank, w.size
    assert w.coll_path() == "", w.coll_path()
    x = np.full(1 << 16, r + 1, dtype=np.float32)
    w.all_reduce(x, timeout=20)
    assert (x == n * (n + 1) // 2).all()
    assert w.coll_path() == want, (w.coll_path(), want)
    # Copies take any dtype, as bytes: complex and bool too.
    c = np.full(5, complex(r, -r), dtype=np.complex64)
    w.broadcast(c, src=n - 1, timeout=20)
    assert (c == complex(n - 1, 1 - n)).all(), c
    g = np.asarray(w.all_gather(np.array([r % 2 == 0] * 3), timeout=20))
    assert g.shape == (n, 3) and g.dtype == np.bool_
    assert g[:, 0].tolist() == [i % 2 == 0 for i in range(n)], g
    big = np.full(1 << 20, float(r), dtype=np.float64)
    w.broadcast(big, src=0, timeout=20)
    assert (big == 0).all()
    m = np.full(3, float(r + 1))
    w.all_reduce(m, op="mean", timeout=20)
    assert np.allclose(m, (n + 1) / 2), m
    assert w.coll_path() == want
print("rank", r, "ok", flush=True)
'''


@pytest.mark.parametrize("path", ["auto", "rdv"])
def test_world_collectives_take_the_shared_segment(path, monkeypatch):
    # One host: the world's collectives run over its shared segment, as the C
    # API's do; TPU_COLL_PATH=rdv keeps them on the rendezvous.
    monkeypatch.setenv("TPU_COLL_PATH", path)
    procs, results = start_ranks(PATH_WORKER, 3, "shm" if path == "auto" else "rdv")
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert "ok" in out
