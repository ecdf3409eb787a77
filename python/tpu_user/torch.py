# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""torch.distributed backend "tpu": ``import tpu_user.torch`` registers it.

Then ``torch.distributed.init_process_group("tpu", ...)`` runs the job's
collectives and point-to-point transfers over libtpu_user, with any
``init_method`` (env://, tcp://, file://): the ranks swap their addresses
through the store torch made, so the backend needs no port of its own.
See Documentation/torch.rst.
"""
from __future__ import annotations

import datetime

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

from . import _tpu_torch

NAME = "tpu"


def _create(store, rank, size, timeout):
    return _tpu_torch.create_process_group(store, rank, size, timeout)


if NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(NAME, _create)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier for this backend.

    torch 1.13 lets only Gloo through its own function; the group's method
    is the same barrier: rank 0 hears from every rank within ``timeout``
    (the group's by default) and names the ranks that did not check in.
    """
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if timeout is None:
        timeout = datetime.timedelta(milliseconds=0)
    return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


def coll_path(group=None):
    """Which path the group's collectives take: ``"shm"`` (the library's
    shared-memory collectives, every rank on this host), ``"hier"`` (ranks
    on several hosts: a segment per host, its leader over the network) or
    ``"rdv"`` (the rendezvous: TPU_COLL_PATH=rdv or flat, or where neither
    segment path can be had).  Decided once, when the group forms, the same
    on every rank."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _tpu_torch.coll_path(pg)


# torch 1.13's own dist.monitored_barrier refuses every backend but Gloo
# before it looks at the group; programs call it unchanged, so groups of
# this backend take the function above and all others torch's.
_torch_monitored_barrier = dist.distributed_c10d.monitored_barrier


def _dispatching_monitored_barrier(group=dist.GroupMember.WORLD, timeout=None,
                                   wait_all_ranks=False):
    pg = group if group is not None else dist.GroupMember.WORLD
    if pg is not None and pg is not dist.GroupMember.NON_GROUP_MEMBER and \
            dist.get_backend(pg) == NAME:
        return monitored_barrier(pg, timeout, wait_all_ranks)
    return _torch_monitored_barrier(group, timeout, wait_all_ranks)


if getattr(dist.distributed_c10d.monitored_barrier, "__module__", "") != __name__:
    dist.distributed_c10d.monitored_barrier = _dispatching_monitored_barrier
    dist.monitored_barrier = _dispatching_monitored_barrier
