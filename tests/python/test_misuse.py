# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Careless callers: timeouts that hold, an accept that survives its own
timeout, and arguments the library refuses refused here too, clearly."""
import errno
import time

import numpy as np
import pytest

import tpu_user


def test_future_result_timeout_waits_once(rdv):
    # It waited for the operation, then as long again for the future.
    fut = rdv.recv_async("never-sent")
    t0 = time.monotonic()
    with pytest.raises(tpu_user.TimeoutError) as e:
        fut.result(0.5)
    took = time.monotonic() - t0
    assert 0.45 < took < 0.9, took
    assert isinstance(e.value, TimeoutError)
    t0 = time.monotonic()
    with pytest.raises(tpu_user.TimeoutError):
        fut.exception(0.5)
    assert time.monotonic() - t0 < 0.9
    # Still pending, and still works.
    rdv.send("never-sent", np.arange(3))
    assert np.asarray(fut.result(10)).tolist() == [0, 1, 2]


def test_accept_timeout_is_the_packages_and_the_next_accept_works(ctx):
    lst = ctx.listen(["tcp://127.0.0.1:0"])
    for _ in range(2):
        t0 = time.monotonic()
        with pytest.raises(tpu_user.TimeoutError) as e:
            lst.accept(timeout=0.2)
        assert time.monotonic() - t0 < 0.6
        assert e.value.errno == errno.ETIMEDOUT
        assert isinstance(e.value, TimeoutError)  # the built-in one too
    a = ctx.connect(lst.url("tcp"))
    b = lst.accept(timeout=10)
    a.write(payloads=[b"hello"], timeout=10)
    assert bytes(b.read(timeout=10).payloads[0]) == b"hello"
    # And an accept_async after a timed-out accept gets the next pipe.
    with pytest.raises(tpu_user.TimeoutError):
        lst.accept(timeout=0.1)
    fut = lst.accept_async()
    c = ctx.connect(lst.url("tcp"))
    d = fut.result(10)
    for p in (a, b, c, d):
        p.close()
    lst.close()


@pytest.mark.parametrize("key", ["", b""])
def test_empty_key_is_refused(rdv, key):
    for call in (lambda: rdv.send(key, np.zeros(1), timeout=1),
                 lambda: rdv.recv(key, timeout=1),
                 lambda: rdv.recv_async(key),
                 lambda: rdv.send_async(key, np.zeros(1))):
        with pytest.raises(tpu_user.Error) as e:
            call()
        assert e.value.errno == errno.EINVAL and "empty" in str(e.value)


def test_recv_into_read_only_buffer_says_writable(rdv):
    rdv.send_async("ro", np.arange(4, dtype=np.uint8))
    with pytest.raises(TypeError, match="writable"):
        rdv.recv_into("ro", bytes(4), timeout=5)
    with pytest.raises(TypeError, match="writable"):
        rdv.recv_into("ro", memoryview(bytearray(4)).toreadonly(), timeout=5)
    out = bytearray(4)
    rdv.recv_into("ro", out, timeout=5)
    assert list(out) == [0, 1, 2, 3]
