# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Every torch.distributed operation on the "tpu" backend against Gloo on
the same inputs (and against a reference where torch 1.13's Gloo lacks the
operation or the dtype): 2, 3 and 4 ranks, every CPU dtype, lengths 0, 1
and odd, blocking and async_op=True, non-contiguous tensors, subgroups.

One launch of N rank processes per world size runs every case of
torch_dist_cases.py (file:// init, one store file) and writes one result per
case and rank; each case is one test here, failing with what every rank
reported.  Skipped without torch or without the backend."""
import json
import os

import pytest

from torch_dist_helper import HERE, finish, launch, require_backend

require_backend()
import torch_dist_cases  # noqa: E402  (imports torch)

SIZES = (2, 3, 4)
_runs = {}


def _run(n, tmp_root):
    if n not in _runs:
        d = tmp_root / f"ops{n}"
        d.mkdir()
        store = d / "store"
        procs = launch(lambda r: [os.path.join(HERE, "torch_dist_cases.py"), r, n,
                                  f"file://{store}", d / f"rank{r}.json"], n, d)
        done = finish(procs, timeout=240)
        per_rank = []
        for r, (rc, out, err) in enumerate(done):
            res = {}
            p = d / f"rank{r}.json"
            if p.exists():
                for line in p.read_text().splitlines():
                    j = json.loads(line)
                    res[j["case"]] = j
            per_rank.append((rc, err, res))
        _runs[n] = per_rank
    return _runs[n]


@pytest.mark.parametrize("case", list(torch_dist_cases.CASES))
@pytest.mark.parametrize("n", SIZES)
def test_torch_dist_op(n, case, tmp_path_factory):
    bad = []
    for r, (rc, err, res) in enumerate(_run(n, tmp_path_factory.getbasetemp())):
        j = res.get(case)
        if j is None:
            bad.append(f"rank {r}: no result (exit {rc}): {err[-1500:]}")
        elif not j["ok"]:
            bad.append(f"rank {r}: {j['error']}\n{j.get('where', '')}")
    assert not bad, f"{case} on {n} ranks:\n" + "\n".join(bad)


@pytest.mark.parametrize("n", SIZES)
def test_torch_dist_ops_exit(n, tmp_path_factory):
    """After the cases every rank tears its groups down and exits 0 (3: the
    teardown hung for 30 s; None: killed at the launch's bound)."""
    for r, (rc, err, res) in enumerate(_run(n, tmp_path_factory.getbasetemp())):
        assert rc == 0, f"rank {r} of {n}: exit {rc}: {err[-2000:]}"
