# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""PyTorch tensors through __dlpack__ (skipped without PyTorch)."""
import numpy as np
import pytest

import tpu_user

torch = pytest.importorskip("torch")

TORCH_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16",
                "float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("name", TORCH_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (4, 3), (1 << 15,)], ids=str)
def test_torch_roundtrip(rdv, name, shape):
    dtype = getattr(torch, name)
    a = (torch.arange(int(np.prod(shape)) if shape else 1) % 7).to(dtype).reshape(shape)
    fut = rdv.send_async("k", a)
    t = rdv.recv("k", timeout=5)
    fut.result(5)
    assert t.dtype == name
    # DLPack 0.6 has no bool: PyTorch gets a bool tensor's bytes as uint8.
    b = torch.from_dlpack(t)
    assert tuple(b.shape) == tuple(a.shape)
    assert torch.equal(b.to(a.dtype) if name == "bool" else b, a)


def test_torch_from_dlpack_shares_memory(rdv):
    rdv.send_async("k", torch.arange(16, dtype=torch.float32))
    t = rdv.recv("k", timeout=5)
    x = torch.from_dlpack(t)
    y = np.asarray(t)
    x[5] = -1
    assert y[5] == -1
    del t
    assert x[5].item() == -1


def test_torch_recv_into(rdv):
    a = torch.randn(256, 1024)
    out = torch.empty_like(a)
    fut = rdv.send_async("k", a)
    rdv.recv_into("k", out, timeout=5)
    fut.result(5)
    assert torch.equal(a, out)


def test_torch_non_contiguous(rdv):
    a = torch.arange(12.0).reshape(3, 4)
    with pytest.raises(ValueError, match="contiguous"):
        rdv.send_async("k", a.t())
    fut = rdv.send_async("k", a.t().contiguous())
    assert torch.equal(torch.from_dlpack(rdv.recv("k", timeout=5)), a.t())
    fut.result(5)


def test_torch_requires_grad_is_refused(rdv):
    a = torch.ones(3, requires_grad=True)
    with pytest.raises(Exception):
        rdv.send_async("k", a)
    fut = rdv.send_async("k", a.detach())
    rdv.recv("k", timeout=5)
    fut.result(5)


def test_torch_pipe_message(ctx):
    lst = ctx.listen(["tcp://127.0.0.1:0"])
    acc = lst.accept_async()
    p = ctx.connect(lst.url())
    q = acc.result(10)
    tensors = [torch.randn(64, 64), torch.arange(100, dtype=torch.int64),
               torch.zeros(0, dtype=torch.bfloat16)]
    p.write(tensors, metadata=b"torch", timeout=10)
    msg = q.read(timeout=10)
    assert msg.metadata == b"torch"
    for a, t in zip(tensors, msg.tensors):
        assert torch.equal(torch.from_dlpack(t), a)
    p.close()
    q.close()
    lst.close()


def test_torch_refusals_and_bool_on_the_fast_path(rdv):
    # A plain torch.Tensor is taken without Tensor.__dlpack__; the refusals
    # it made are still made (each key is free again afterwards).
    with pytest.raises(RuntimeError, match="gradient"):
        rdv.send_async("g", torch.ones(3, requires_grad=True))
    with pytest.raises(RuntimeError, match="conjugate"):
        rdv.send_async("c", torch.ones(3, dtype=torch.complex64).conj())
    with pytest.raises(ValueError, match="contiguous"):
        rdv.send_async("n", torch.ones(4, 4).t())
    b = torch.tensor([True, False, True])
    fut = rdv.send_async("b", b)
    got = rdv.recv("b", timeout=5)
    assert fut.result(5) is None
    assert got.dtype == "bool" and np.asarray(got).tolist() == [True, False, True]
    out = torch.zeros(3, dtype=torch.bool)
    rdv.send_async("b2", b)
    assert rdv.recv_into("b2", out, timeout=5) is out
    assert out.tolist() == [True, False, True]


def test_torch_bool_costs_what_uint8_costs(rdv):
    # torch will not export bool through DLPack: taking one used to cost a
    # RuntimeError (with a C++ backtrace) per call, about 100 times a uint8
    # tensor's cost; it is now a uint8 view called bool again.
    import time

    def cost(t, n=100):
        t0 = time.perf_counter()
        for i in range(n):
            fut = rdv.send_async("k", t)
            rdv.cancel("k")
            assert isinstance(fut.exception(5), tpu_user.CancelledError)
        return time.perf_counter() - t0

    u8, b = torch.zeros(1000, dtype=torch.uint8), torch.zeros(1000, dtype=torch.bool)
    cost(u8, 10), cost(b, 10)
    assert min(cost(b) for _ in range(3)) < 5 * min(cost(u8) for _ in range(3))
