# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""The examples' helpers, importable by the tests."""
import importlib.util
import os

from conftest import TOP

_spec = importlib.util.spec_from_file_location(
    "tpu_example_all_reduce", os.path.join(TOP, "examples", "python", "all_reduce.py"))
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
free_port = _mod.free_port
