# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""DistributedDataParallel over the "tpu" backend: a small MLP trained 30
steps on 2 and 4 ranks (ranks start from different weights, several
gradient buckets) ends with the parameters the same training over Gloo
gives, within float32 summation-order noise, and the same on every rank."""
import json
import os

import pytest

from torch_dist_helper import HERE, finish, launch, require_backend

require_backend()


@pytest.mark.parametrize("n", [2, 4])
def test_torch_dist_ddp_matches_gloo(n, tmp_path):
    store = tmp_path / "store"
    procs = launch(lambda r: [os.path.join(HERE, "torch_dist_ddp.py"), r, n, f"file://{store}"],
                   n, tmp_path)
    results = finish(procs, timeout=180)
    for r, (rc, out, err) in enumerate(results):
        assert rc == 0, f"rank {r} exit {rc}: {err[-3000:]}"
        res = json.loads(out.strip().splitlines()[-1])
        assert res["moved"] > 1e-3, res                    # it trained
        assert res["vs_gloo"] <= 1e-5 * max(1.0, res["scale"]) + 1e-6, res
        assert res["vs_rank0"] <= 1e-6, res
