# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Shared by the test_torch_dist_*.py files: the skip when torch or the
"tpu" backend is missing, and the launch of N rank processes (scripts with
launch() and finish(), functions with spawn_ranks()), each within a bound."""
import os
import subprocess
import sys
import time

import pytest

from conftest import child_env, native_stacks

HERE = os.path.dirname(os.path.abspath(__file__))


def require_backend():
    """Skip the calling module, saying why, without torch or the backend."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (make deps)")
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch has no torch.distributed with Gloo", allow_module_level=True)
    try:
        import tpu_user.torch  # noqa: F401
    except ImportError as e:
        pytest.skip(f"the torch backend tpu is not built ({e}; make python says why)",
                    allow_module_level=True)
    return torch


def rank_env(**extra):
    # One compute thread per rank: four ranks on two cores.
    return child_env(OMP_NUM_THREADS=1, **extra)


def launch(argv_of_rank, n, logdir, env_of_rank=None):
    """Start n processes, rank r running `python3 argv_of_rank(r)`, its
    stdout and stderr in files under logdir (pipes that nobody drains while
    another rank is awaited would block a chatty rank, and its collective)."""
    procs = []
    for r in range(n):
        env = env_of_rank(r) if env_of_rank else rank_env()
        with open(os.path.join(logdir, f"rank{r}.out"), "w") as o, \
                open(os.path.join(logdir, f"rank{r}.err"), "w") as e:
            p = subprocess.Popen([sys.executable, *map(str, argv_of_rank(r))], env=env,
                                 stdout=o, stderr=e, stdin=subprocess.DEVNULL)
        p.logs = (o.name, e.name)
        procs.append(p)
    return procs


def finish(procs, timeout):
    """Wait for every process within one overall bound; kill the rest.
    Returns [(returncode, stdout, stderr)], returncode None for a killed one."""
    deadline = time.monotonic() + timeout
    out = []
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
            rc = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = None
        with open(p.logs[0]) as o, open(p.logs[1]) as e:
            out.append((rc, o.read(), e.read()))
    return out


# The ranks of one test finish in seconds; a rank still running after this
# is stuck.  Failing that test alone, with the ranks' native stacks on
# stderr, lets the rest of the suite run, where the per-test watchdog
# (conftest.py) ends the whole run.
SPAWN_BOUND_S = float(os.environ.get("TPU_PY_SPAWN_BOUND", "120"))


def spawn_ranks(fn, n, *args, bound=None):
    """torch.multiprocessing's spawn of fn(rank, n, *args) on n ranks, joined
    within bound seconds (SPAWN_BOUND_S by default): a rank that fails
    raises as spawn's join does; ranks still running then are killed, after
    gdb printed their stacks (to the test's stderr, which its failure report
    shows), and the test fails naming them."""
    import torch.multiprocessing as mp
    limit = SPAWN_BOUND_S if bound is None else bound
    ctx = mp.start_processes(fn, args=(n,) + args, nprocs=n, start_method="spawn", join=False)
    deadline = time.monotonic() + limit
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            stuck = [p.pid for p in ctx.processes if p.is_alive()]
            native_stacks(stuck, sys.stderr)
            for p in ctx.processes:
                p.kill()
            for p in ctx.processes:
                p.join(10)
            pytest.fail(f"{fn.__name__} on {n} ranks: pids {stuck} still running after "
                        f"{limit:.0f} s (killed; their native stacks are on stderr)")
