# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""pytest set-up for tpu_user's tests.

The package is imported from build/python (make python) unless
TPU_PY_BUILD names another directory.  With TPU_PY_TAP=FILE each test's
result is also written there as a TAP line ("ok N - test", "not ok",
"# SKIP"), which tests/python/run.sh prints for tests/summary.sh to count.
"""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("TPU_PY_BUILD", os.path.join(TOP, "build", "python"))
if BUILD not in sys.path:
    sys.path.insert(0, BUILD)

# Gloo (the torch tests' reference groups) binds to what the host name
# resolves to, which on some machines is not a loopback address: hold it to
# lo, as every network test here talks to loopback only.  Spawned ranks
# inherit it.
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

_tap = {"n": 0, "file": None}


def pytest_configure(config):
    path = os.environ.get("TPU_PY_TAP")
    if path:
        _tap["file"] = open(path, "w", buffering=1)


def _why(report):
    """The failure's last lines, short, on the TAP line (a CI log's tail shows it)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    lines = [l.strip() for l in str(getattr(crash, "message", "") or "").splitlines()
             if l.strip()]
    return " | ".join(lines[-3:]).replace("#", "")[:300] or "failed"


def pytest_runtest_logreport(report):
    f = _tap["file"]
    if f is None:
        return
    # One line per test: its call, or the setup that failed or skipped it,
    # or a teardown that failed after a passing call.
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _tap["n"] += 1
        name = report.nodeid.replace("#", "")
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else "skipped"
            f.write(f"ok {_tap['n']} - {name} # SKIP {reason}\n")
        elif report.passed:
            f.write(f"ok {_tap['n']} - {name}\n")
        else:
            f.write(f"not ok {_tap['n']} - {name}: {_why(report)}\n")
    elif report.when == "teardown" and report.failed:
        _tap["n"] += 1
        f.write(f"not ok {_tap['n']} - {report.nodeid} (teardown)\n")


def pytest_collectreport(report):
    # A module that skips itself whole (no torch, no backend) is one SKIP
    # line with its reason, not silence.
    f = _tap["file"]
    if f is None or not report.skipped:
        return
    _tap["n"] += 1
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else "skipped"
    f.write(f"ok {_tap['n']} - {report.nodeid} # SKIP {reason}\n")


def pytest_unconfigure(config):
    f = _tap["file"]
    if f is not None:
        f.write(f"1..{_tap['n']}\n")
        f.close()


def child_env(**extra):
    """The environment for a child Python that imports tpu_user."""
    env = dict(os.environ)
    env["PYTHONPATH"] = BUILD + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def spawn(code, *args, pass_fds=(), env=None, stdout=subprocess.PIPE):
    """Start `python -c code args...` importing tpu_user from the build."""
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], pass_fds=pass_fds,
                            env=env or child_env(), stdout=stdout, stderr=subprocess.PIPE,
                            text=True)


@pytest.fixture
def ctx():
    import tpu_user
    c = tpu_user.Context()
    yield c
    c.close()


@pytest.fixture
def rdv(ctx):
    r = ctx.rendezvous("inprocess")
    yield r
    r.close()
