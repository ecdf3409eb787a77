# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""The test harness itself: a test that hangs fails by name (conftest.py's
watchdog), with the stacks of this process and of its children, instead of
holding the run until run.sh's timeout."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

HANGS = '''
import subprocess, sys, time

def test_first_passes():
    pass

def test_hangs_with_a_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    time.sleep(600)

def test_never_reached():
    pass
'''


def test_a_hung_test_fails_by_name_with_the_stacks(tmp_path):
    shutil.copy(os.path.join(HERE, "conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(HANGS)
    tap = tmp_path / "inner.tap"
    env = dict(os.environ, TPU_PY_TAP=str(tap), TPU_PY_TEST_TIMEOUT="3")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(tmp_path)], env=env, capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    lines = tap.read_text().splitlines()
    assert p.returncode == 1, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert lines[0].startswith("ok 1 - ") and lines[0].endswith("::test_first_passes"), lines
    assert lines[1].startswith("not ok 2 - ") and "::test_hangs_with_a_child: still running" \
        in lines[1], lines
    assert lines[2:] == ["1..2"], lines
    err = p.stderr
    # Our stack (the test's sleep), and the child's from its own faulthandler.
    assert "test_hangs_with_a_child still running after" in err, err[-3000:]
    assert 'in test_hangs_with_a_child' in err, err[-3000:]
    if shutil.which("gdb"):
        assert "native stacks of pid" in err and "#0 " in err, err[-3000:]
        # The one-line digest that tests/summary.sh puts on the failure line:
        # the hung thread's sleep, in this process and in the child.
        log = tmp_path / "stderr.log"
        log.write_text(err)
        digest = subprocess.run([os.path.join(HERE, "..", "stack-digest.sh"), str(log)],
                                capture_output=True, text=True, check=True).stdout
        assert digest.count("clock_nanosleep") >= 2 and " || " in digest, digest
    assert "Fatal Python error: Aborted" in err, err[-3000:]


STUCK_RANKS = '''
import time

import pytest

pytest.importorskip("torch.multiprocessing")
from torch_dist_helper import spawn_ranks


def _rank(rank, n):
    if rank == 1:
        time.sleep(600)


def test_stuck_rank():
    spawn_ranks(_rank, 2, bound=4)


def test_after_it_runs():
    pass
'''


def test_a_stuck_rank_fails_its_test_alone(tmp_path):
    # spawn_ranks (torch_dist_helper.py): a rank still running after the
    # bound fails that test, naming it, with its stacks, and the run goes on.
    pytest.importorskip("torch.multiprocessing")
    for f in ("conftest.py", "torch_dist_helper.py"):
        shutil.copy(os.path.join(HERE, f), tmp_path / f)
    (tmp_path / "test_inner.py").write_text(STUCK_RANKS)
    tap = tmp_path / "inner.tap"
    env = dict(os.environ, TPU_PY_TAP=str(tap), TPU_PY_TEST_TIMEOUT="100")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(tmp_path)], env=env, capture_output=True, text=True, timeout=200,
                       cwd=tmp_path)
    lines = tap.read_text().splitlines()
    assert p.returncode == 1, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert lines[0].startswith("not ok 1 - ") and "::test_stuck_rank" in lines[0], lines
    assert "_rank on 2 ranks: pids [" in p.stdout and "still running after 4 s" in p.stdout, \
        p.stdout[-3000:]
    assert lines[1].startswith("ok 2 - ") and lines[1].endswith("::test_after_it_runs"), lines
    if shutil.which("gdb"):
        # In the failure's report, with the test's captured stderr.
        assert "native stacks of pid" in p.stdout and "#0 " in p.stdout, p.stdout[-3000:]


SUMMARY_LOG = '''TAP version 13
1..3
ok 1 - first
not ok 2 - two ranks on each host
# # rank 2 of 4: check over "hier": failed (line 12)
# # rank: tests/unit/x.c:5: st == 0 failed

ok 3 - after it
    not ok 1 - nested, with nothing after it
not ok 4 - its parent
''' + "".join(f"# line {i}\n" for i in range(10))


def test_summary_lists_what_a_failure_printed_after_it(tmp_path):
    # A CI log's tail is all some readers get: under each failure, the
    # lines its log has after it (at most six), then the totals alone.
    log = tmp_path / "suite.log"
    log.write_text(SUMMARY_LOG)
    p = subprocess.run([os.path.join(HERE, "..", "summary.sh"), "vm pair", str(log), "1"],
                       capture_output=True, text=True, timeout=60)
    out = p.stdout.splitlines()
    assert p.returncode == 1, p.stdout
    at = out.index("  vm pair: not ok 2 - two ranks on each host")
    assert out[at + 1:at + 3] == ['    | rank 2 of 4: check over "hier": failed (line 12)',
                                  '    | rank: tests/unit/x.c:5: st == 0 failed'], out
    assert out[at + 3] == "  vm pair: not ok 1 - nested, with nothing after it", out
    # A parent whose child failed is not counted again, and its lines
    # are not the child's.
    assert not any("its parent" in line or "line 0" in line for line in out), out
    assert out[-1] == "2 passed, 2 failed", out


CRASH_LOG = '''ok 1 - before
# tap: pid 77 died of Segmentation fault at address 0x10; the last point was 1 (before)
tests/rdv/rdv_test(+0x16ab2)[0x55eb4a2baab2]
Thread 2 (Thread 0x7f85 (LWP 78) "rdv_test"):
#0  0x00007f856c68cc17 in __GI___wait4 (pid=79) at wait4.c:30
#3  0x000055eb4a2baac6 in crash_report (sig=11) at tests/unit/tap.c:122
#4  <signal handler called>
#5  0x000055eb4a2c30a8 in ip_abort (rdv=<optimized out>, status=-104) at rdv/rdv_inprocess.c:281
#6  0x000055eb4a2c060e in tpu_rendezvous_abort (rdv=0x5, status=-104) at rdv/rendezvous.c:582
#7  0x000055eb4a2ab9ea in race_call (arg=0x7ffc) at rdv_cases.c:836
#8  0x00007f856c6421f5 in start_thread (arg=<optimized out>) at pthread_create.c:442
#9  0x00007f856c6c28ec in clone3 () at clone3.S:81

Thread 1 (Thread 0x7f86 (LWP 77) "rdv_test"):
#0  futex_wait (private=0) at futex-internal.h:146
not ok 2 - remote: worker 0 (status 0xb)
'''


def test_summary_names_a_crash_and_its_first_frames(tmp_path):
    # A forked worker's crash report comes before the point that fails for
    # it: the failures list gets its line and the crashing thread's first
    # four frames, in a suite that failed only.
    log = tmp_path / "suite.log"
    log.write_text(CRASH_LOG)
    summary = os.path.join(HERE, "..", "summary.sh")
    p = subprocess.run([summary, "rdv", str(log), "1"], capture_output=True, text=True,
                       timeout=60)
    out = p.stdout.splitlines()
    assert p.returncode == 1, p.stdout
    assert ("  rdv: a crash: pid 77 died of Segmentation fault at address 0x10; the last "
            "point was 1 (before); frames: ip_abort at rdv/rdv_inprocess.c:281 < "
            "tpu_rendezvous_abort at rdv/rendezvous.c:582 < race_call at rdv_cases.c:836 < "
            "start_thread at pthread_create.c:442") in out, out
    assert out[-1] == "1 passed, 1 failed", out
    # A suite that passed (a test made a child crash on purpose) lists nothing.
    log.write_text(CRASH_LOG.replace("not ok 2", "ok 2"))
    p = subprocess.run([summary, "rdv", str(log), "0"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "crash" not in p.stdout, p.stdout
