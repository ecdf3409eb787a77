# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Tensors in and out: every dtype, shapes, zero-copy export, bad input."""
import gc
import sys
import weakref

import numpy as np
import pytest

import tpu_user

NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64", "float16", "float32", "float64", "complex64", "complex128"]
SHAPES = [(), (0,), (7,), (3, 5), (2, 0, 4), (2, 3, 4, 5), (1 << 16,)]


def sample(dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    a = (np.arange(n) % 97).astype(dtype).reshape(shape)
    if np.dtype(dtype).kind == "c":
        a = (a + 1j * a).astype(dtype)
    return a


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_numpy_roundtrip(rdv, dtype, shape):
    a = sample(dtype, shape)
    fut = rdv.send_async("k", a)
    t = rdv.recv("k", timeout=5)
    assert fut.result(5) is None
    assert t.dtype == dtype
    assert t.shape == a.shape
    assert t.nbytes == a.nbytes
    b = np.asarray(t)
    assert b.dtype == a.dtype and b.shape == a.shape
    assert np.array_equal(a, b)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_recv_into(rdv, dtype):
    a = sample(dtype, (33, 65))		# over INLINE_MAX for most dtypes
    out = np.zeros_like(a)
    fut = rdv.send_async("k", a)
    assert rdv.recv_into("k", out, timeout=5) is out
    fut.result(5)
    assert np.array_equal(a, out)


def test_output_is_zero_copy(rdv):
    rdv.send_async("k", np.arange(10, dtype=np.int32))
    t = rdv.recv("k", timeout=5)
    via_dlpack = np.from_dlpack(t)
    via_buffer = np.asarray(t)
    via_memoryview = memoryview(t)
    via_buffer[3] = 1000		# NumPy marks what from_dlpack made read-only
    assert via_dlpack[3] == 1000
    assert via_memoryview.cast("B").cast("i")[3] == 1000
    assert t.__dlpack_device__() == (1, 0)
    # The memory outlives the Tensor while a consumer holds it.
    del t
    gc.collect()
    assert via_dlpack.tolist() == [0, 1, 2, 1000, 4, 5, 6, 7, 8, 9]


def test_tensor_dlpack_capsule_unconsumed_is_freed(rdv):
    rdv.send_async("k", np.arange(4, dtype=np.float32))
    t = rdv.recv("k", timeout=5)
    before = sys.getrefcount(t)
    cap = t.__dlpack__()
    assert sys.getrefcount(t) == before + 1
    del cap		# never consumed: its destructor calls the deleter
    assert sys.getrefcount(t) == before
    with pytest.raises(BufferError):
        t.__dlpack__(stream=1)


def test_send_keeps_source_alive(rdv):
    a = np.arange(1 << 16, dtype=np.float64)
    ref = weakref.ref(a)
    fut = rdv.send_async("k", a)
    del a
    gc.collect()
    assert ref() is not None, "the source died while its send was pending"
    out = np.empty(1 << 16)
    rdv.recv_into("k", out, timeout=5)
    fut.result(5)
    gc.collect()
    assert ref() is None, "the source stayed alive after its send completed"
    assert out[12345] == 12345.0


def test_inline_send_keeps_source_alive(rdv):
    a = np.arange(8, dtype=np.uint8)
    ref = weakref.ref(a)
    fut = rdv.send_async("k", a)
    del a
    gc.collect()
    assert ref() is not None
    assert np.asarray(rdv.recv("k", timeout=5)).tolist() == list(range(8))
    fut.result(5)
    gc.collect()
    assert ref() is None


def test_non_contiguous_is_a_clear_error(rdv):
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    with pytest.raises(ValueError, match="not C-contiguous"):
        rdv.send("k", a.T, timeout=1)
    with pytest.raises(ValueError, match="not C-contiguous"):
        rdv.send_async("k", a[:, ::2])
    # A contiguous copy is the documented way.
    fut = rdv.send_async("k", np.ascontiguousarray(a.T))
    assert np.array_equal(np.asarray(rdv.recv("k", timeout=5)), a.T)
    fut.result(5)


def test_readonly_source_is_fine_destination_is_not(rdv):
    a = np.arange(6, dtype=np.int16)
    a.setflags(write=False)
    fut = rdv.send_async("k", a)
    out = np.empty(6, dtype=np.int16)
    out.setflags(write=False)
    with pytest.raises((BufferError, ValueError)):
        rdv.recv_into("k", out, timeout=1)
    assert np.asarray(rdv.recv("k", timeout=5)).tolist() == list(range(6))
    fut.result(5)


def test_bytes_like_inputs(rdv):
    for src in (b"hello", bytearray(b"world!"), memoryview(b"abc")):
        fut = rdv.send_async("k", src)
        t = rdv.recv("k", timeout=5)
        fut.result(5)
        assert t.dtype == "uint8" and bytes(memoryview(t)) == bytes(src)


@pytest.mark.parametrize("bad", [None, 3, "text", [1, 2, 3], object()])
def test_not_a_tensor(rdv, bad):
    with pytest.raises(TypeError):
        rdv.send_async("k", bad)


def test_bad_keys_and_timeouts(rdv):
    with pytest.raises(TypeError):
        rdv.send_async(42, np.zeros(1))
    with pytest.raises(ValueError):
        rdv.recv("k", timeout=-1)
    with pytest.raises(ValueError):
        rdv.recv("k", timeout=0)
    with pytest.raises(tpu_user.Error) as e:
        rdv.send_async("x" * 5000, np.zeros(1))
    assert e.value.errno is not None


def test_recv_into_mismatch(rdv):
    fut = rdv.send_async("k", np.arange(10000, dtype=np.float32))
    with pytest.raises(tpu_user.Error) as e:
        rdv.recv_into("k", np.empty(10000, dtype=np.int32), timeout=5)
    assert e.value.status_name == "EMSGSIZE"
    assert "float32" in str(e.value) and "int32" in str(e.value)
    fut.result(5)		# the tensor was consumed (and dropped), not left hanging


def test_dtypes_list():
    assert set(tpu_user.dtypes()) == set(NUMPY_DTYPES) | {"bfloat16"}


@pytest.mark.parametrize("sent", [np.arange(10, dtype=np.float32),		# came inline
                                  np.arange(20000, dtype=np.float32),		# larger
                                  np.arange(5000, dtype=np.float32),		# smaller
                                  np.arange(5000, dtype=np.float64)],		# another dtype
                         ids=["inline", "larger", "smaller", "dtype"])
@pytest.mark.parametrize("mode", ["blocking", "future"])
def test_recv_into_size_mismatch(rdv, sent, mode):
    out = np.zeros(10000, dtype=np.float32)
    fut = rdv.send_async("k", sent)
    with pytest.raises(tpu_user.Error) as e:
        if mode == "blocking":
            rdv.recv_into("k", out, timeout=5)
        else:
            rdv.recv_async("k", out, timeout=5).result(10)
    assert e.value.status_name == "EMSGSIZE"
    fut.result(5)		# the sender is done: its tensor was taken and dropped
    fut = rdv.send_async("k", np.ones(3))
    assert np.asarray(rdv.recv("k", timeout=5)).tolist() == [1, 1, 1]
    fut.result(5)


@pytest.mark.parametrize("shape, dtype", [((3, 4), "float32"), (0, "int8"), ((1 << 20,), "float64"),
                                          ((), "complex64"), ((2, 1 << 19), "bfloat16")])
def test_empty(rdv, shape, dtype):
    t = tpu_user.empty(shape, dtype)
    want = (shape,) if isinstance(shape, int) else tuple(shape)
    assert t.shape == want and t.dtype == dtype
    a = np.asarray(t)
    if dtype != "bfloat16":
        assert a.dtype == np.dtype(dtype) and a.shape == want
    a.reshape(-1).view(np.uint8)[...] = 7	# writable, in place
    fut = rdv.send_async("k", t)
    out = tpu_user.empty(shape, dtype)
    rdv.recv_into("k", out, timeout=5)
    fut.result(5)
    assert bytes(memoryview(out).cast("B")) == bytes(memoryview(t).cast("B"))


def test_empty_bad_input():
    with pytest.raises(ValueError):
        tpu_user.empty((2, -1))
    with pytest.raises(ValueError):
        tpu_user.empty((2,), "float128")
    with pytest.raises(TypeError):
        tpu_user.empty("abc")
