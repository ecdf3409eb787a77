# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""tpu_user: move tensors between threads, processes and hosts without copies.

Python bindings of tensorpipe's libtpu_user: the TensorFlow-style
rendezvous (send / recv by key), TensorPipe-style pipes (messages of
tensors and metadata), and collectives over a world of ranks started by a
launcher (torchrun, mpirun).  Tensors go in as anything with the buffer
protocol (NumPy arrays, bytearray, memoryview) or ``__dlpack__`` (PyTorch);
they come out as :class:`Tensor`, which NumPy and PyTorch wrap without a
copy (``numpy.from_dlpack``, ``torch.from_dlpack``, ``numpy.asarray``).

Every call that waits releases the GIL.  Completions are handed to Python
through a queue that only Python threads drain: no Python code ever runs
on the library's threads.  See Documentation/python.rst.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import errno as _errno
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from . import _tpu_user as _c
from ._tpu_user import (  # noqa: F401  (re-exported)
    INLINE_MAX,
    Registration,
    Remote,
    MAX_DIMS,
    CancelledError,
    ClosedError,
    ConnectionError,
    Error,
    ForkedError,
    PeerGoneError,
    Tensor,
    TimeoutError,
    create_domain,
    dtypes,
    empty,
    library_version,
    make_key,
    parse_key,
    probe,
    status_name,
)

__all__ = [
    "Context", "Rendezvous", "Listener", "Pipe", "Message", "World", "Future", "Tensor",
    "Error", "TimeoutError", "ConnectionError", "PeerGoneError", "ClosedError",
    "CancelledError", "ForkedError", "make_key", "parse_key", "library_version", "probe",
    "status_name", "dtypes", "empty", "log_library", "INLINE_MAX", "MAX_DIMS",
    "Agent", "Registration", "Remote", "create_domain",
]

__version__ = "1.2.0"

log = logging.getLogger("tpu_user")


class Future(concurrent.futures.Future):
    """A concurrent.futures.Future that asyncio code may also ``await``.

    It is resolved by a Python thread (the context's dispatcher, or a thread
    waiting on the operation), never by the library's own thread.
    """

    _op = None
    _ctx = None

    def _wait_op(self, timeout):
        # Wait on the operation itself (GIL released) rather than for the
        # dispatcher thread to get round to it: one thread hand-off fewer.
        op, ctx = self._op, self._ctx
        if op is not None and not self.done() and op._wait(timeout):
            _settle(ctx._c._drain(0))
            _resolve(op)

    # One deadline for both waits (the operation's, then the future's): a
    # timeout t bounds the whole call to about t, not 2t.  A wait that ends
    # unresolved raises tpu_user.TimeoutError, which is also the built-in
    # TimeoutError (and so concurrent.futures.TimeoutError, Python 3.11+).
    def _wait_both(self, timeout, get):
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        self._wait_op(timeout)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return get(left)
        except concurrent.futures.TimeoutError:
            if self.done():
                raise  # the operation's own outcome
            raise _timeout_error("future") from None

    def result(self, timeout=None):
        return self._wait_both(timeout, super().result)

    def exception(self, timeout=None):
        return self._wait_both(timeout, super().exception)

    def __await__(self):
        return asyncio.wrap_future(self).__await__()


class _LoopFuture:
    """What an op resolves for a coroutine (Context._aio): its asyncio future.

    Usually resolved on the loop's own thread (the loop's reader of the
    context's descriptor drains the op); from any other thread that drained
    it first (a waiter, the dispatcher), through call_soon_threadsafe.
    """

    __slots__ = ("_fut", "_loop", "_tid", "_op", "_ctx")

    def __init__(self, fut, loop):
        self._fut, self._loop = fut, loop
        self._tid = threading.get_ident()
        self._op = self._ctx = None

    def done(self) -> bool:
        return False  # the asyncio future is only looked at on its loop's thread

    def _set(self, ok, value) -> None:
        fut = self._fut
        if fut.done():  # cancelled by the coroutine's caller: the op went on
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def set_result(self, value) -> None:
        self._put(True, value)

    def set_exception(self, exc) -> None:
        self._put(False, exc)

    def _put(self, ok, value) -> None:
        if threading.get_ident() == self._tid:
            self._set(ok, value)
        else:
            try:
                self._loop.call_soon_threadsafe(self._set, ok, value)
            except RuntimeError:
                pass  # the loop closed: nobody awaits it any more


_settle_lock = threading.RLock()  # futures' callbacks may start more operations


def _resolve(op) -> None:
    """Resolve op's future, if it has one and it is not resolved yet."""
    fut = op.future
    if fut is None:
        return
    ok, value = op._outcome()
    with _settle_lock:
        # The op and its future refer to each other; the op is no GC object,
        # so the cycle is broken here, once the future has its outcome.
        op.future = None
        fut._op = fut._ctx = None
        if fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


def _settle(ops) -> None:
    """Resolve the futures of finished ops (on a Python thread)."""
    for op in ops:
        op._outcome()
        _resolve(op)
    _flush_library_log()


def _flush_library_log() -> None:
    for line in _c._log_take():
        log.debug("library: %s", line)


def log_library(enable: bool = True, debug: bool = True) -> None:
    """Route libtpu_user's own log lines (TPU_LOG) into logging.getLogger("tpu_user").

    With debug, its debug lines (which rendezvous implementation and why,
    which transport and channel a pipe took, the keys pending at a timeout)
    are logged even without TPU_LOG=debug.  A Context made while the
    "tpu_user" logger is enabled for DEBUG turns this on by itself.  Lines
    are handed to logging by Python threads (the next call that waits, or
    the completion dispatcher), never by the library's threads.
    """
    _c._log_capture(enable, debug)
    if not enable:
        _flush_library_log()


def _timeout_error(what: str) -> Error:
    exc = TimeoutError(_errno.ETIMEDOUT, f"{what}: timed out (ETIMEDOUT)")
    exc.status = -_errno.ETIMEDOUT
    exc.status_name = "ETIMEDOUT"
    return exc


class Context:
    """One library context: an io_uring and a completion thread.

    Everything asynchronous belongs to a context; close it (or use it as a
    context manager) to fail whatever is still pending with ClosedError.
    Like the library's, a context belongs to the process that made it: in a
    child forked afterwards every call raises ForkedError.

    :param no_kmod: never use /dev/tensorpipe.
    :param transports: pipes: comma list of transports allowed ("tcp,shm").
    :param channels: pipes: comma list of channels allowed ("kmod,cma,basic").
    """

    def __init__(self, *, no_kmod: bool = False, transports: Optional[str] = None,
                 channels: Optional[str] = None, dev_path: Optional[str] = None):
        if log.isEnabledFor(logging.DEBUG):
            log_library(True)
        self._c = _c._Context(no_kmod=no_kmod, transports=transports, channels=channels,
                              dev_path=dev_path)
        self._lock = threading.Lock()
        self._dispatcher: Optional[threading.Thread] = None
        self._loop = None  # the asyncio loop that reads fileno() (_aio)
        _flush_library_log()
        log.debug("context created (pid %d, no_kmod=%s)", self._c.pid, no_kmod)

    def set_secret(self, secret) -> None:
        """The job secret every connection of this context proves
        (tpu_context_set_secret; bytes or str, b"" removes it).  Without a
        call, TPU_JOB_SECRET or TPU_JOB_SECRET_FILE decides; see
        Documentation/security.rst."""
        if isinstance(secret, str):
            secret = secret.encode()
        self._c.set_secret(bytes(secret))

    # -- completions ---------------------------------------------------
    def _dispatch(self) -> None:
        while not self._c.closed:
            try:
                _settle(self._c._drain(0.5))
            except ForkedError:
                return
            except Exception:  # a future's callback failed: keep serving the others
                log.exception("tpu_user: settling completions")
        _settle(self._c._drain(0))

    def _future(self, op) -> Future:
        fut = Future()
        fut.set_running_or_notify_cancel()
        fut._op, fut._ctx = op, self
        op.future = fut
        if op.done():
            # It may have finished, and been drained without a future, already.
            _resolve(op)
        with self._lock:
            if self._dispatcher is None or not self._dispatcher.is_alive():
                self._dispatcher = threading.Thread(target=self._dispatch, daemon=True,
                                                    name="tpu_user-completions")
                self._dispatcher.start()
        return fut

    # -- asyncio ----------------------------------------------------------
    def _loop_attach(self, loop) -> bool:
        """Let loop settle this context's completions on its own thread: one
        reader of the context's descriptor, no thread per future.  One loop
        at a time; False for any other (its coroutines then use futures)."""
        with self._lock:
            if self._loop is loop:
                return True
            if self._loop is not None and not self._loop.is_closed():
                return False
            loop.add_reader(self._c.fileno(), self._loop_ready)
            self._loop = loop
            return True

    def _loop_ready(self) -> None:
        try:
            _settle(self._c._drain(0))
        except ForkedError:
            pass

    def _loop_detach(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop or not loop.is_running():
            loop.remove_reader(self._c.fileno())
        else:
            # Another thread's loop: it drops the reader itself, before the descriptor goes.
            done = threading.Event()

            def drop():
                loop.remove_reader(self._c.fileno())
                done.set()
            loop.call_soon_threadsafe(drop)
            done.wait(5)

    async def _aio(self, op):
        """Await op on the running loop; its result, or its exception raised."""
        loop = asyncio.get_running_loop()
        if not self._loop_attach(loop):
            return await self._future(op)
        fut = loop.create_future()
        lf = _LoopFuture(fut, loop)
        lf._op, lf._ctx = op, self
        op.future = lf
        if op.done():
            _resolve(op)
        return await fut

    def _wait(self, op, timeout: Optional[float], what: str):
        """Block (GIL released) until op finished; its result or its exception."""
        done = op._wait(timeout)
        _settle(self._c._drain(0))
        if not done:
            raise _timeout_error(what)
        ok, value = op._outcome()
        if not ok:
            raise value
        return value

    def fileno(self) -> int:
        """An eventfd that becomes readable when an operation finished."""
        return self._c.fileno()

    @property
    def closed(self) -> bool:
        return self._c.closed

    # -- factories -----------------------------------------------------
    def rendezvous(self, impl: str = "auto") -> "Rendezvous":
        """A new rendezvous: impl "auto" (kmod, else cma), "inprocess", "kmod" or "cma"."""
        r = Rendezvous(self, _c._rendezvous(self._c, impl))
        _flush_library_log()
        log.debug("rendezvous created: %s", r.impl)
        return r

    def join(self, fd: int) -> "Rendezvous":
        """Join the rendezvous another process shared (Rendezvous.share()); fd stays yours."""
        return Rendezvous(self, _c._join(self._c, fd))

    def remote_rendezvous(self, task: str, peers: Optional[dict] = None,
                          listen_urls: Optional[Sequence[str]] = None) -> "Rendezvous":
        """This worker's rendezvous of a cluster: task "/job:J/replica:R/task:T",
        peers {task: url}; keys' device names decide where tensors live."""
        return Rendezvous(self, _c._remote(self._c, task, listen_urls, dict(peers or {})))

    def listen(self, urls: Optional[Sequence[str]] = None) -> "Listener":
        """Accept pipes on urls ("tcp://127.0.0.1:0", "shm://name"); None: loopback tcp and shm."""
        return Listener(self, _c._listen(self._c, list(urls) if urls is not None else None))

    def connect(self, url: str) -> "Pipe":
        """Open a pipe to url; returns at once (operations queue until it is up)."""
        log.debug("connecting to %s", url)
        return Pipe(self, _c._connect(self._c, url))

    def world(self, job: Optional[str] = None, timeout: Optional[float] = None) -> "World":
        """Form the world from the launcher's variables (RANK, WORLD_SIZE, MASTER_ADDR,
        MASTER_PORT, or Open MPI's); every rank calls it."""
        return World(self, job=job, timeout=timeout)

    def close(self) -> None:
        """Fail every pending operation (ClosedError) and stop the context's thread."""
        if self._loop is not None and not self._c.closed:
            self._loop_detach()
        self._c.close()
        d = self._dispatcher
        if d is not None and d is not threading.current_thread():
            d.join()
        _settle(self._c._drain(0))

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Rendezvous:
    """A table of keys: a producer posts a tensor under a key, a consumer takes it.

    Keys are str or bytes (make_key() builds TensorFlow's).  Each tensor's
    dtype, shape and device travel beside it (under a second key), so
    recv() returns a typed Tensor.
    """

    def __init__(self, ctx: Context, c):
        self._ctx = ctx
        self._c = c

    @property
    def impl(self) -> Optional[str]:
        """"inprocess", "kmod", "cma" or "remote"."""
        return self._c.impl

    def send(self, key, tensor, timeout: Optional[float] = None) -> None:
        """Post tensor under key and wait until a receiver took it (the tensor is then free).

        A timeout withdraws the send and raises TimeoutError."""
        self._c.send(key, tensor, timeout)

    def send_async(self, key, tensor) -> Future:
        """Post tensor under key; the future completes when the tensor may be reused.

        The tensor is kept alive (and must stay unchanged) until then."""
        return self._ctx._future(self._c._send_op(key, tensor))

    def recv(self, key, timeout: Optional[float] = None) -> Tensor:
        """Receive the tensor posted under key, typed as it was sent."""
        return self._c.recv(key, timeout)

    def recv_into(self, key, out, timeout: Optional[float] = None):
        """Receive into out (same dtype and byte length, C-contiguous, writable): the fast path."""
        return self._c.recv_into(key, out, timeout)

    def recv_async(self, key, out=None, timeout: Optional[float] = None) -> Future:
        """recv() (out None) or recv_into() as a future."""
        return self._ctx._future(self._c._recv_op(key, out, timeout))

    def cancel(self, key) -> bool:
        """Withdraw this member's pending operations on key (they get CancelledError)."""
        return self._c.cancel(key)

    def abort(self, err: int = _errno.ECONNABORTED) -> None:
        """Fail every pending and later operation of every member with errno err."""
        self._c.abort(err)

    def share(self) -> int:
        """A descriptor another process joins with (Context.join); close it when passed on."""
        return self._c.share()

    def url(self, transport: Optional[str] = None) -> str:
        """Remote rendezvous: where peers reach this worker."""
        return self._c.url(transport)

    def add_peer(self, task: str, url: str) -> None:
        """Remote rendezvous: add a worker to the cluster map."""
        self._c.add_peer(task, url)

    def close(self) -> None:
        """Leave the rendezvous; this member's pending operations fail with ClosedError."""
        self._c.close()

    def __enter__(self) -> "Rendezvous":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class Message:
    """What a pipe read returns: metadata bytes, typed tensors, inline payloads."""

    metadata: bytes = b""
    tensors: list = field(default_factory=list)
    payloads: list = field(default_factory=list)


def _message(value) -> Message:
    metadata, tensors, payloads = value
    return Message(metadata, tensors, payloads)


class Pipe:
    """One end of a pipe: ordered messages of metadata, payloads and tensors."""

    def __init__(self, ctx: Context, c):
        self._ctx = ctx
        self._c = c
        self._pending_read = None

    def write(self, tensors: Sequence[Any] = (), metadata: bytes = b"",
              payloads: Sequence[Any] = (), timeout: Optional[float] = None) -> None:
        """Write one message and wait until its memory may be reused."""
        op = self._c._write_op(list(tensors), bytes(metadata), list(payloads))
        self._ctx._wait(op, timeout, "write")

    def write_async(self, tensors: Sequence[Any] = (), metadata: bytes = b"",
                    payloads: Sequence[Any] = ()) -> Future:
        """Write one message; the future completes when its memory may be reused."""
        return self._ctx._future(self._c._write_op(list(tensors), bytes(metadata),
                                                   list(payloads)))

    def _read(self, out, timeout):
        op = self._pending_read
        if op is None:
            op = self._c._read_op(out)
        self._pending_read = op
        try:
            value = self._ctx._wait(op, timeout, "read")
        except TimeoutError:
            raise	# the read stays pending: the next read() gets its message
        except BaseException:
            self._pending_read = None
            raise
        self._pending_read = None
        return _message(value)

    def read(self, timeout: Optional[float] = None) -> Message:
        """Read the next message into new tensors."""
        return self._read(None, timeout)

    def read_into(self, out: Sequence[Any], timeout: Optional[float] = None) -> Message:
        """Read the next message into the caller's tensors (matching dtypes and lengths)."""
        if self._pending_read is not None:
            raise RuntimeError("a read that timed out is still pending: call read() first")
        return self._read(list(out), timeout)

    async def awrite(self, tensors: Sequence[Any] = (), metadata: bytes = b"",
                     payloads: Sequence[Any] = ()) -> None:
        """write() for asyncio: the running loop reads the context's descriptor
        (loop.add_reader) and settles the write on its own thread."""
        await self._ctx._aio(self._c._write_op(list(tensors), bytes(metadata), list(payloads)))

    async def aread(self, out: Optional[Sequence[Any]] = None) -> Message:
        """read() (out None) or read_into(out) for asyncio, as awrite().  As
        read_into, the tensors' read is posted by the library's thread as soon
        as the message's descriptor is in: no Python runs in between."""
        op = self._c._read_op(list(out) if out is not None else None)
        return _message(await self._ctx._aio(op))

    def read_async(self, out: Optional[Sequence[Any]] = None) -> Future:
        """read() or read_into() as a future resolving to a Message."""
        op = self._c._read_op(list(out) if out is not None else None)
        fut = self._ctx._future(op)
        msg_fut = Future()
        msg_fut.set_running_or_notify_cancel()

        def done(f):
            exc = f.exception()
            if exc is not None:
                msg_fut.set_exception(exc)
            else:
                msg_fut.set_result(_message(f.result()))
        fut.add_done_callback(done)
        return msg_fut

    def transport(self) -> str:
        """"tcp", "shm", or "" while the ends still negotiate."""
        return self._c.transport()

    def channel(self) -> str:
        """The channel CPU tensors take ("kmod", "cma", "basic"...), "" while negotiating."""
        return self._c.channel()

    def close(self) -> None:
        """Close this end: pending operations fail here, the peer's with ConnectionError."""
        self._c.close()

    def __enter__(self) -> "Pipe":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Listener:
    """Accepts pipes on one or more URLs."""

    def __init__(self, ctx: Context, c):
        self._ctx = ctx
        self._c = c
        # The library arms one accept at a time: one that timed out in
        # accept() stays armed here, and the next accept takes it over.
        self._armed: Optional[Future] = None
        self._armed_lock = threading.Lock()

    def url(self, transport: Optional[str] = None) -> str:
        """The URL peers connect to ("tcp", "shm"; None: the first)."""
        return self._c.url(transport)

    def accept(self, timeout: Optional[float] = None) -> Pipe:
        """Wait for the next pipe.

        A timeout raises tpu_user.TimeoutError and leaves the accept armed:
        the next accept() (or accept_async()) gets the pipe it brings."""
        with self._armed_lock:
            fut, self._armed = self._armed, None
        if fut is None:
            fut = self._new_accept()
        try:
            return fut.result(timeout)
        except BaseException as e:
            if fut.done():
                raise
            with self._armed_lock:
                if self._armed is None:
                    self._armed = fut
            if isinstance(e, TimeoutError):
                raise _timeout_error("accept") from None
            raise

    def accept_async(self) -> Future:
        """The next pipe, as a future."""
        with self._armed_lock:
            fut, self._armed = self._armed, None
        return fut if fut is not None else self._new_accept()

    def _new_accept(self) -> Future:
        fut = self._ctx._future(self._c._accept_op())
        pipe_fut = Future()
        pipe_fut.set_running_or_notify_cancel()

        def done(f):
            exc = f.exception()
            if exc is not None:
                pipe_fut.set_exception(exc)
            else:
                pipe_fut.set_result(Pipe(self._ctx, f.result()))
        fut.add_done_callback(done)
        return pipe_fut

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class World:
    """Ranks formed from the launcher's variables, and collectives among them.

    Every rank makes one, and calls the collectives in the same order.
    """

    def __init__(self, ctx: Context, job: Optional[str] = None,
                 timeout: Optional[float] = None):
        self._ctx = ctx
        self._c = _c._World(ctx._c, job, timeout)
        info = self._c.info()
        self.rank: int = info["rank"]
        self.size: int = info["size"]
        log.debug("world formed: rank %d of %d (%s)", self.rank, self.size,
                  info["convention"] or "caller")

    def info(self) -> dict:
        return self._c.info()

    def rendezvous(self) -> Rendezvous:
        """The world's remote rendezvous (task "/job:worker/replica:0/task:RANK")."""
        return Rendezvous(self._ctx, self._c.rendezvous())

    def pipe(self, rank: int) -> Pipe:
        """The pipe to rank, made on first use; owned by the world."""
        return Pipe(self._ctx, self._c.pipe(rank))

    def barrier(self, timeout: Optional[float] = None) -> None:
        """Wait for every rank: through the store, or, with a timeout (seconds),
        as a collective of the world's rendezvous bounded by it."""
        if timeout is None:
            self._c.barrier()
        else:
            self._c.barrier_timeout(timeout)

    def exchange_blobs(self, blob: bytes) -> list:
        """Every rank's blob (at most 64 KiB each; e.g. Registration.export()),
        by rank, through the world's store. Every rank calls it, in the same order."""
        return self._c.exchange_blobs(bytes(blob))

    def device_name(self, rank: int) -> str:
        """The device of rank in the world's keys: "/job:worker/replica:0/task:RANK/device:CPU:0"."""
        return self._c.device_name(rank)

    # Collectives: every rank calls them in the same order.  A rank whose
    # tensor (size, dtype), op, source or collective differs from the
    # others' makes every rank raise Error (status TPU_E_COLL_MISMATCH) at
    # once, naming the difference; the world stays usable.  timeout
    # (seconds; None: 60) bounds the call: one that runs out raises
    # TimeoutError, and the world is done (its rendezvous was aborted).
    def all_reduce(self, tensor, op: str = "sum", timeout: Optional[float] = None):
        """Reduce tensor over every rank, in place: op sum, prod, min, max or mean."""
        return self._c.all_reduce(tensor, op, timeout)

    def broadcast(self, tensor, src: int = 0, timeout: Optional[float] = None):
        """src's tensor into every rank's, in place."""
        return self._c.broadcast(tensor, src, timeout)

    def all_gather(self, tensor, timeout: Optional[float] = None) -> Tensor:
        """Every rank's tensor, stacked: shape (size, *tensor.shape)."""
        return self._c.all_gather(tensor, timeout)

    def reduce_scatter(self, tensor, op: str = "sum",
                       timeout: Optional[float] = None) -> Tensor:
        """The reduction of every rank's tensor, of which this rank gets chunk rank
        (1-D; the first count % size ranks one element more).  timeout: seconds,
        None for the library's 60 s."""
        return self._c.reduce_scatter(tensor, op, timeout)

    def send(self, tensor, dst: int, timeout: Optional[float] = None) -> None:
        """The tensor's bytes to rank dst; returns once dst received them.  The
        n-th send to dst meets dst's n-th recv from this rank."""
        self._c.send(tensor, dst, timeout)

    def recv(self, tensor, src: int, timeout: Optional[float] = None) -> int:
        """The next message of rank src into tensor (writable); its length in
        bytes.  A timed-out or too-small recv consumes nothing."""
        return self._c.recv(tensor, src, timeout)

    def coll_path(self) -> str:
        """What moves the collectives' bytes, decided at the first one: "shm"
        (one shared segment, every rank on this host), "hier" (a segment per
        host, its leader over the network), "rdv" (the rendezvous), or ""
        before the first collective (TPU_COLL_PATH chooses; :doc:`collectives`)."""
        return self._c.coll_path()

    def close(self) -> None:
        """Leave the world (waits until every rank leaves, at most its timeout)."""
        self._c.close()

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Agent:
    """One-sided transfers (Documentation/xfer.rst): registers tensors,
    exports and loads their blobs, reads and writes lists of slices.

    Each list is of handles (whole) or ``(handle, offset, length)`` slices in
    bytes.  ``read``/``write`` block (GIL released); ``read_async``/
    ``write_async`` return a :class:`Future` (``await`` it in asyncio code)
    that resolves to None once the data moved (and the notification went).
    Notifications: ``notifications()`` takes those queued,
    ``notification(timeout)`` waits for the next one, ``notification_async()``
    is a Future of it, as ``(peer, bytes)``, in order per peer.

    Close it (or use it as a context manager) before its context: transfers in
    flight fail with CancelledError, waiting notifications with an Error.
    """

    def __init__(self, context: Context, name: Optional[str] = None,
                 backends: Optional[str] = None, domain_fd: Optional[int] = None):
        if not isinstance(context, Context):
            raise TypeError("Agent(context): a tpu_user.Context")
        self._ctx = context
        self._c = _c._Agent(context._c, name, backends)
        if domain_fd is not None:
            try:
                self._c.use_domain(domain_fd)
            except BaseException:
                self._c.close()
                raise

    def use_domain(self, fd: int) -> None:
        """Join the module domain behind fd (from create_domain(), inherited
        or received): agents in one domain move data through the module
        (backend "kmod").  Once, before exporting or loading."""
        self._c.use_domain(fd)

    @property
    def name(self) -> str:
        return self._c.name

    def register(self, tensor, read: bool = True, write: bool = False) -> Registration:
        """Register tensor's memory; read/write: what peers that load its export may do."""
        return self._c.register(tensor, read=read, write=write)

    def load(self, blob: bytes) -> Remote:
        """A peer's registration from its exported blob."""
        return self._c.load(blob)

    def read(self, local, remote, notif: Optional[bytes] = None, repeat: int = 1) -> None:
        """Remote slices into local ones; blocks. repeat posts it that many times."""
        self._c.read(local, remote, notif, repeat)

    def write(self, local, remote, notif: Optional[bytes] = None, repeat: int = 1) -> None:
        """Local slices into remote ones; blocks."""
        self._c.write(local, remote, notif, repeat)

    def read_async(self, local, remote, notif: Optional[bytes] = None) -> Future:
        """read() as a Future (resolving to None); the slices' tensors stay
        referenced until it is done. Errors in the lists raise here."""
        return self._ctx._future(self._c._post(False, local, remote, notif))

    def write_async(self, local, remote, notif: Optional[bytes] = None) -> Future:
        """write() as a Future."""
        return self._ctx._future(self._c._post(True, local, remote, notif))

    def notifications(self) -> list:
        """The queued notifications, oldest first, as [(peer, bytes)]."""
        return self._c.notifications()

    def notification(self, timeout: Optional[float] = None) -> tuple:
        """Wait for the next notification: (peer, bytes); TimeoutError after timeout."""
        op = self._c._notif_op()
        try:
            return self._ctx._wait(op, timeout, "notification")
        except TimeoutError:
            # Give the waiter back, unless a notification reached it meanwhile.
            if not self._c._notif_cancel(op):
                return self._ctx._wait(op, None, "notification")
            raise

    def notification_async(self) -> Future:
        """The next notification as a Future of (peer, bytes)."""
        return self._ctx._future(self._c._notif_op())

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
