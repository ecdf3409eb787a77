# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""tpu_user.Agent: one-sided transfers of NumPy arrays and torch tensors.

Two agents of this process on two contexts; each backend (cma, tcp) moves
lists of slices both ways, notifications arrive in order, a WRITE to a
read-only export and a damaged blob are refused, deregistration revokes.
"""
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
