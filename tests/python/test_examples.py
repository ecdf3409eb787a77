# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""The examples in examples/python run and check their own results."""
import os
import subprocess
import sys

import pytest

from conftest import TOP, child_env


@pytest.mark.parametrize("name, lines", [("producer_consumer.py", "as sent"),
                                         ("pipe_server.py", "sums")])
def test_example(name, lines):
    p = subprocess.run([sys.executable, os.path.join(TOP, "examples", "python", name)],
                       env=child_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert lines in p.stdout
    assert "WRONG" not in p.stdout
