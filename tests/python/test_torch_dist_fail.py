# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Failures on the "tpu" backend raise RuntimeError within their bound,
never hang: a rank killed in the middle of an all_reduce, a rank that never
joins init_process_group, an operation a peer never joins (the group's
timeout), tensors whose sizes differ across ranks."""
import json
import os

from torch_dist_helper import HERE, finish, launch, require_backend

require_backend()

SLACK = 8.0      # seconds past the group's timeout: process start-up on a loaded 2-core box


def _run(tmp_path, mode, n, timeout_s, ranks=None):
    store = tmp_path / "store"
    ranks = list(range(n)) if ranks is None else ranks
    procs = launch(lambda i: [os.path.join(HERE, "torch_dist_fail.py"), mode, ranks[i], n,
                              f"file://{store}", timeout_s], len(ranks), tmp_path)
    return finish(procs, timeout=4 * timeout_s + 60)


def _reports(out):
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _check_raised(rank, rc, out, err, ops, bound):
    assert rc == 0, f"rank {rank}: exit {rc}: {err[-2000:]}"
    got = {j["op"]: j for j in _reports(out)}
    for op in ops:
        j = got.get(op)
        assert j is not None, f"rank {rank}: no report for {op}: {out} {err[-1000:]}"
        assert j["raised"], f"rank {rank}: {op} passed"
        assert j["s"] <= bound, f"rank {rank}: {op} raised after {j['s']} s (bound {bound})"
    return got


def test_torch_dist_rank_killed_mid_all_reduce(tmp_path):
    timeout = 10
    res = _run(tmp_path, "kill", 3, timeout)
    for r, (rc, out, err) in enumerate(res[:2]):
        got = _check_raised(r, rc, out, err, ["all_reduce"], timeout + SLACK)
        assert "tpu" in got["all_reduce"]["msg"], got     # the library's message
    assert res[2][0] == -9                               # the rank that died


def test_torch_dist_rank_never_joins(tmp_path):
    timeout = 4
    res = _run(tmp_path, "nojoin", 3, timeout, ranks=[0, 1])   # rank 2 never starts
    for r, (rc, out, err) in enumerate(res):
        _check_raised(r, rc, out, err, ["init_process_group"], 2 * timeout + SLACK)


def test_torch_dist_timeout(tmp_path):
    timeout = 3
    rc, out, err = _run(tmp_path, "timeout", 2, timeout)[0]
    got = _check_raised(0, rc, out, err, ["all_reduce", "recv"], timeout + SLACK)
    # Not before the bound; the recv after it may fail at once (a timeout
    # aborts the group, as Gloo's closes its pairs).
    assert got["all_reduce"]["s"] >= 0.8 * timeout, got


def test_torch_dist_mismatched_sizes(tmp_path):
    timeout = 10
    for r, (rc, out, err) in enumerate(_run(tmp_path, "mismatch", 2, timeout)):
        # The broadcast's root (rank 0) may see the mismatch only at its next call.
        _check_raised(r, rc, out, err, ["all_reduce", "broadcast_again", "all_gather_into_tensor"]
                      + (["broadcast"] if r else []), timeout + SLACK)
