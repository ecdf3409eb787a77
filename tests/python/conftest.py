# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""pytest set-up for tpu_user's tests.

The package is imported from build/python (make python) unless
TPU_PY_BUILD names another directory.  With TPU_PY_TAP=FILE each test's
result is also written there as a TAP line ("ok N - test", "not ok",
"# SKIP"), which tests/python/run.sh prints for tests/summary.sh to count.
"""
import faulthandler
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

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

_tap = {"n": 0, "file": None, "config": None}


def pytest_configure(config):
    _tap["config"] = config
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


# A test that hangs fails by name instead of holding the whole run until
# run.sh's timeout: after TPU_PY_TEST_TIMEOUT seconds (default 300; the
# slowest test takes about 13 here) the watchdog prints every thread's
# stack (with gdb's native stacks where gdb is installed), has each
# descendant process print its own (Python ones through PYTHONFAULTHANDLER,
# set below, on SIGABRT), writes the test's TAP line and the plan, and
# ends the run: a hang leaves the library in a state no later test should
# be judged in.
os.environ.setdefault("PYTHONFAULTHANDLER", "1")
_TEST_TIMEOUT = float(os.environ.get("TPU_PY_TEST_TIMEOUT", "300"))


def _descendants(pid):
    kids, found = {}, []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as st:
                ppid = int(st.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    todo = [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            found.append(k)
            todo.append(k)
    return found


def native_stacks(pids, out):
    """Write every thread's native stack of each pid to out, where gdb is
    installed (make deps); a test that bounds its own children calls it
    before it kills them, so that the stacks say where they were."""
    if not shutil.which("gdb"):
        out.write("# tests/python: no gdb, no native stacks\n")
        return
    for pid in pids:
        try:
            bt = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex",
                                 "thread apply all bt"], capture_output=True, text=True,
                                timeout=60).stdout
        except (OSError, subprocess.SubprocessError) as e:
            bt = f"gdb: {e}\n"
        out.write(f"\n# tests/python: native stacks of pid {pid}:\n{bt}")
        out.flush()


def _hung(nodeid, started):
    secs = time.monotonic() - started
    real = sys.__stderr__
    kids = _descendants(os.getpid())
    # The library's own frames (C), at most 8 processes: this one and its
    # descendants.
    native_stacks([os.getpid()] + kids[:7], real)
    # Then the Python stacks: what the children print lands in pytest's capture.
    for pid in kids:
        try:
            os.kill(pid, signal.SIGABRT)
        except OSError:
            pass
    time.sleep(3)
    capman = _tap["config"].pluginmanager.getplugin("capturemanager") if _tap["config"] else None
    out = err = ""
    if capman is not None:
        capman.suspend_global_capture(in_=True)
        out, err = capman.read_global_capture()
    real.write(f"\n# tests/python: {nodeid} still running after {secs:.0f} s\n"
               f"# its output so far:\n{out}{err}\n# every thread of the test process:\n")
    real.flush()
    faulthandler.dump_traceback(file=real, all_threads=True)
    real.flush()
    f = _tap["file"]
    if f is not None:
        _tap["n"] += 1
        f.write(f"not ok {_tap['n']} - {nodeid}: still running after {secs:.0f} s "
                f"(TPU_PY_TEST_TIMEOUT), the run stopped there\n")
        f.write(f"1..{_tap['n']}\n")
        f.close()
    os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # Setup, call and teardown under one watchdog.
    timer = threading.Timer(_TEST_TIMEOUT, _hung, (item.nodeid, time.monotonic()))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


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
