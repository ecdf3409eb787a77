# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""torch.distributed backend "tpu" (python/torch/): each operation once
against a reference computed here, on 2 and 3 ranks spawned with file://
init, plus the failure paths (mismatched sizes, a dead rank, a non-dense
tensor, an exit without destroy_process_group)
and tcp:// init.  The exhaustive comparison with Gloo lives in
test_torch_dist_*.py.  Skipped without torch or without the backend
(make python says why it skipped building it)."""
import datetime
import glob
import os
import socket
import sys
import time

import pytest

from torch_dist_helper import spawn_ranks

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytest.importorskip("torch.multiprocessing")
try:
    import tpu_user.torch  # noqa: F401
except ImportError as e:
    # Skipped only where make had a reason to skip building it.
    if all(os.path.exists(p) for p in ("/usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp",
                                       "/usr/include/pybind11/pybind11.h")):
        raise
    pytest.skip(f"tpu backend not built (no libtorch-dev or pybind11-dev): {e}",
                allow_module_level=True)

TIMEOUT = datetime.timedelta(seconds=20)


def _init(rank, n, init, timeout=TIMEOUT):
    import tpu_user.torch  # noqa: F401  (registers "tpu" in the child)
    dist.init_process_group("tpu", init_method=init, rank=rank, world_size=n, timeout=timeout)


def _inp(rank, n=10, dtype=torch.float32):
    return (torch.arange(n, dtype=torch.float64) * (rank + 1) + rank).to(dtype)


def _ops(rank, n, init, path="shm"):
    _init(rank, n, init)
    # One host: the library's shared-memory collectives, unless TPU_COLL_PATH=rdv.
    assert tpu_user.torch.coll_path() == path
    ranks = range(n)
    # all_reduce: library dtypes and ops, and the ones built here (int8, bool, bitwise).
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                  torch.int64, torch.uint8, torch.int8, torch.int16):
        for op, red in ((dist.ReduceOp.SUM, lambda a, b: a + b),
                        (dist.ReduceOp.MAX, torch.maximum), (dist.ReduceOp.MIN, torch.minimum),
                        (dist.ReduceOp.PRODUCT, lambda a, b: a * b)):
            t = _inp(rank, 7, dtype)
            dist.all_reduce(t, op=op)
            ref = _inp(0, 7, dtype)
            for r in ranks[1:]:
                ref = red(ref, _inp(r, 7, dtype))
            assert torch.allclose(t.double(), ref.double(), rtol=1e-2), (dtype, op, t, ref)
    for op, red in ((dist.ReduceOp.BAND, torch.bitwise_and), (dist.ReduceOp.BOR, torch.bitwise_or),
                    (dist.ReduceOp.BXOR, torch.bitwise_xor)):
        t = _inp(rank, 9, torch.int64) * 37
        dist.all_reduce(t, op=op)
        ref = _inp(0, 9, torch.int64) * 37
        for r in ranks[1:]:
            ref = red(ref, _inp(r, 9, torch.int64) * 37)
        assert torch.equal(t, ref), (op, t, ref)
    b = torch.tensor([rank == 1, False, True])
    dist.all_reduce(b, op=dist.ReduceOp.MAX)
    assert b.tolist() == [True, False, True]
    with pytest.raises(RuntimeError, match="bitwise"):
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND)
    # complex: torch views it as float pairs before the backend sees it.
    c = torch.full((4,), complex(rank, 1), dtype=torch.complex64)
    dist.all_reduce(c)
    assert torch.allclose(c, torch.full((4,), complex(sum(ranks), n), dtype=torch.complex64))
    # 0 and 1 element.
    for k in (0, 1):
        t = torch.ones(k)
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((k,), float(n)))
    # A non-contiguous tensor: reduced, and written back in place.
    nc = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * (rank + 1)
    assert not nc.is_contiguous()
    dist.all_reduce(nc)
    assert torch.equal(nc, torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * (n * (n + 1) // 2))
    # all_reduce_coalesced
    ts = [torch.ones(3) * rank, torch.ones(5) * (rank + 1)]
    dist.all_reduce_coalesced(ts)
    assert torch.equal(ts[0], torch.full((3,), float(sum(ranks))))
    assert torch.equal(ts[1], torch.full((5,), float(n * (n + 1) // 2)))
    # broadcast, reduce
    t = _inp(rank, 11, torch.int16)
    dist.broadcast(t, src=n - 1)
    assert torch.equal(t, _inp(n - 1, 11, torch.int16))
    t = _inp(rank)
    dist.reduce(t, dst=1)
    assert torch.equal(t, sum(_inp(r) for r in ranks) if rank == 1 else _inp(rank))
    # all_gather, all_gather_into_tensor, gather, scatter
    out = [torch.empty(10) for _ in ranks]
    dist.all_gather(out, _inp(rank))
    assert all(torch.equal(out[r], _inp(r)) for r in ranks)
    flat = torch.empty(10 * n)
    dist.all_gather_into_tensor(flat, _inp(rank))
    assert torch.equal(flat, torch.cat([_inp(r) for r in ranks]))
    gl = [torch.empty(10) for _ in ranks] if rank == 0 else None
    dist.gather(_inp(rank), gl, dst=0)
    if rank == 0:
        assert all(torch.equal(gl[r], _inp(r)) for r in ranks)
    so = torch.empty(10)
    dist.scatter(so, [_inp(r) * 3 for r in ranks] if rank == 1 else None, src=1)
    assert torch.equal(so, _inp(rank) * 3)
    # reduce_scatter, reduce_scatter_tensor
    o = torch.empty(4)
    dist.reduce_scatter(o, [torch.full((4,), float(rank * 10 + j)) for j in ranks])
    assert torch.equal(o, torch.full((4,), float(sum(r * 10 + rank for r in ranks))))
    o = torch.empty(5)
    dist.reduce_scatter_tensor(o, torch.arange(5.0 * n) + rank)
    assert torch.equal(o, (torch.arange(5.0 * n) * n + sum(ranks))[5 * rank:5 * rank + 5])
    # all_to_all (list), all_to_all_single even and uneven
    outs = [torch.empty(r + 1) for r in ranks]
    dist.all_to_all(outs, [torch.full((rank + 1,), float(rank * 100 + j)) for j in ranks])
    assert all(torch.equal(outs[r], torch.full((r + 1,), float(r * 100 + rank))) for r in ranks)
    o = torch.empty(2 * n)
    dist.all_to_all_single(o, torch.arange(2.0 * n) + 100 * rank)
    assert torch.equal(o, torch.tensor([float(100 * r + 2 * rank + k) for r in ranks
                                        for k in range(2)]))
    # uneven: rank r sends j+1 rows to rank j and gets r+1 rows from each.
    ins = torch.cat([torch.full((j + 1, 2), float(rank * 10 + j)) for j in ranks])
    o = torch.empty((rank + 1) * n, 2)
    dist.all_to_all_single(o, ins, output_split_sizes=[rank + 1] * n,
                           input_split_sizes=[j + 1 for j in ranks])
    assert torch.equal(o, torch.cat([torch.full((rank + 1, 2), float(r * 10 + rank))
                                     for r in ranks]))
    # send/recv with tags, isend/irecv, batch_isend_irecv
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    a = dist.isend(_inp(rank) + 1, nxt, tag=7)
    c = dist.isend(_inp(rank) + 2, nxt, tag=8)
    r8, r7 = torch.empty(10), torch.empty(10)
    dist.recv(r8, prv, tag=8)
    w = dist.irecv(r7, prv, tag=7)
    w.wait()
    a.wait()
    c.wait()
    assert w.is_completed() and torch.equal(r7, _inp(prv) + 1) and torch.equal(r8, _inp(prv) + 2)
    rb = torch.empty(10)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, _inp(rank) * 5, nxt),
                                   dist.P2POp(dist.irecv, rb, prv)])
    for q in reqs:
        q.wait()
    assert torch.equal(rb, _inp(prv) * 5)
    # recv from any source: rank 0 hears from each other rank once, in any order.
    if rank == 0:
        got = set()
        for _ in ranks[1:]:
            t = torch.empty(4, dtype=torch.int32)
            src = dist.recv(t, tag=3)
            assert torch.equal(t, torch.full((4,), src * 11, dtype=torch.int32)), (src, t)
            got.add(src)
        assert got == set(ranks[1:])
    else:
        dist.send(torch.full((4,), rank * 11, dtype=torch.int32), 0, tag=3)
    # Any source while every peer's message is already there: one wins, and
    # each other peer's (taken off the wire by the race, or left there by the
    # cancel) is what a named receive from that peer then gets.
    if rank == 0:
        dist.barrier()
        time.sleep(0.3)
        t = torch.empty(2)
        src = dist.recv(t, tag=5)
        assert torch.equal(t, torch.full((2,), float(src)))
        for p in ranks[1:]:
            if p != src:
                u = torch.empty(2)
                dist.recv(u, p, tag=5)
                assert torch.equal(u, torch.full((2,), float(p))), (p, u)
    else:
        w5 = dist.isend(torch.full((2,), float(rank)), 0, tag=5)
        dist.barrier()
        w5.wait()
    # async everywhere: futures and wait
    t = torch.ones(6)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    assert work.wait()
    assert torch.equal(fut.wait()[0], torch.full((6,), float(n)))
    assert work.is_completed()
    # barrier, monitored barrier, a subgroup
    dist.barrier()
    tpu_user.torch.monitored_barrier(timeout=datetime.timedelta(seconds=10))
    g = dist.new_group([0, n - 1])
    if rank in (0, n - 1):
        t = torch.ones(3) * rank
        dist.all_reduce(t, group=g)
        assert torch.equal(t, torch.full((3,), float(n - 1)))
    dist.barrier()
    dist.destroy_process_group()


def _spawn(fn, n, *args):
    spawn_ranks(fn, n, *args)


@pytest.mark.parametrize("n", [2, 3])
def test_torch_backend_ops(tmp_path, n):
    _spawn(_ops, n, "file://" + str(tmp_path / "init"))


def test_torch_backend_ops_over_the_rendezvous(tmp_path, monkeypatch):
    # TPU_COLL_PATH=rdv: the same results without the shared segment.
    monkeypatch.setenv("TPU_COLL_PATH", "rdv")
    _spawn(_ops, 2, "file://" + str(tmp_path / "init"), "rdv")


def _shm_log(rank, n, init, logdir):
    # The library logs to stderr: keep this rank's.
    fd = os.open(os.path.join(logdir, f"log{rank}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    _init(rank, n, init)
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((5,), 3.0))
    t = torch.arange(6, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.equal(t, torch.arange(6, dtype=torch.float64) * 1.5)
    b = torch.arange(7, dtype=torch.int16) * rank
    dist.broadcast(b, src=1)
    assert torch.equal(b, torch.arange(7, dtype=torch.int16))
    out = torch.empty(2 * 9, dtype=torch.int8)
    dist.all_gather_into_tensor(out, torch.full((9,), rank, dtype=torch.int8))
    assert torch.equal(out, torch.tensor([0] * 9 + [1] * 9, dtype=torch.int8))
    o = torch.empty(11)
    dist.reduce_scatter_tensor(o, torch.ones(22) * (rank + 1))
    assert torch.equal(o, torch.full((11,), 3.0))
    dist.barrier()
    dist.destroy_process_group()


def test_torch_backend_collectives_take_the_shared_segment(tmp_path, monkeypatch):
    # TPU_LOG=debug: the world's calls name the path of each collective.
    monkeypatch.setenv("TPU_LOG", "debug")
    monkeypatch.delenv("TPU_COLL_PATH", raising=False)
    _spawn(_shm_log, 2, "file://" + str(tmp_path / "init"), str(tmp_path))
    for rank in range(2):
        log = (tmp_path / f"log{rank}").read_text()
        for line in ("all-reduce of 5 elements over the shared segment",
                     "all-reduce of 6 elements over the shared segment",
                     "broadcast of 14 elements over the shared segment",
                     "all-gather of 9 elements over the shared segment",
                     "reduce-scatter of 22 elements over the shared segment"):
            assert line in log, (rank, line, log[-2000:])


def _bad_path(rank, n, init):
    with pytest.raises(RuntimeError, match=r"forming the group.*TPU_COLL_PATH=fast"):
        _init(rank, n, init, datetime.timedelta(seconds=10))


def test_torch_backend_bad_coll_path_fails_forming(tmp_path, monkeypatch):
    # The path is decided while the group forms: a bad TPU_COLL_PATH fails there.
    monkeypatch.setenv("TPU_COLL_PATH", "fast")
    _spawn(_bad_path, 2, "file://" + str(tmp_path / "init"))


def _mismatch(rank, n, init):
    _init(rank, n, init, datetime.timedelta(seconds=10))
    t = torch.ones(5 + rank)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="tpu: allreduce"):
        dist.all_reduce(t)
    assert time.monotonic() - start < 10


def test_torch_backend_mismatched_sizes_raise(tmp_path):
    _spawn(_mismatch, 2, "file://" + str(tmp_path / "init"))


def _dead(rank, n, init):
    _init(rank, n, init, datetime.timedelta(seconds=8))
    dist.barrier()
    if rank == 1:
        os._exit(0)  # gone without a word, no destroy_process_group
    start = time.monotonic()
    # The shared-memory path sees the death at once (TPU_E_PEER_GONE).
    with pytest.raises(RuntimeError, match=r"tpu: allreduce \(rank 0 of 2\): the peer process died"):
        dist.all_reduce(torch.ones(1000))
    took = time.monotonic() - start
    assert took < 5, took


def test_torch_backend_dead_rank_raises_within_timeout(tmp_path):
    # Rank 1's exit code is 0; only rank 0's assertions can fail the run.
    _spawn(_dead, 2, "file://" + str(tmp_path / "init"))


def _refuse(rank, n, init):
    _init(rank, n, init)
    # This torch has no CUDA: a CUDA tensor cannot even be made, so the
    # backend's device check is met by a sparse tensor (the dispatcher lets
    # those through to the backend, as it would CUDA ones).
    with pytest.raises(RuntimeError, match="only dense"):
        dist.all_reduce(torch.eye(3).to_sparse())
    t = torch.ones(2)
    dist.all_reduce(t)  # the group still works
    assert torch.equal(t, torch.full((2,), float(n)))
    # No destroy_process_group: the exit must still be clean and prompt.


def test_torch_backend_non_dense_refused_and_exit_without_destroy(tmp_path):
    before = set(glob.glob("/dev/shm/*tpu*"))
    start = time.monotonic()
    _spawn(_refuse, 2, "file://" + str(tmp_path / "init"))
    assert time.monotonic() - start < 60
    assert set(glob.glob("/dev/shm/*tpu*")) <= before


def _tcp(rank, n, init):
    _init(rank, n, init)
    t = torch.ones(3) * rank
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), 1.0))
    dist.destroy_process_group()


def test_torch_backend_tcp_init():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _spawn(_tcp, 2, f"tcp://127.0.0.1:{port}")


def _destroy_while_the_worker_holds_tensors(rank, n, init):
    _init(rank, n, init)
    if rank == 0:
        # The collective's Work, and with it the tensor, end up held by the
        # group's worker alone, which still waits for rank 1 inside the
        # collective when the group goes (with the GIL held, as Python drops
        # it).  The worker then drops the tensor, whose Python object torch
        # kept alive: that takes the GIL, so the group must not hold it
        # while it waits for the worker.
        t = torch.ones(1000)
        w = dist.all_reduce(t, async_op=True)
        del t, w
        dist.destroy_process_group()
    else:
        time.sleep(1.0)
        t = torch.ones(1000)
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((1000,), 2.0))
        dist.destroy_process_group()


def test_torch_backend_destroyed_while_its_worker_holds_tensors(tmp_path):
    # Destroying the group hung on the old code: 60 s is twenty times what it takes.
    spawn_ranks(_destroy_while_the_worker_holds_tensors, 2, "file://" + str(tmp_path / "init"),
                bound=60)
