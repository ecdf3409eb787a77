# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""tests/vm/run.sh's judgement of a VM's death, with a stand-in QEMU on PATH
(no VM boots): a kernel that died before /init boots again, up to three
boots; the emulator's stray single-step trap boots the VM once more, under
TCG only; any other kernel WARNING fails the run at once."""
import glob
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
RUN = os.path.join(REPO, "tests", "vm", "run.sh")
TRAP = os.path.join(REPO, "tests", "vm", "stray-step-trap.sh")

BOOT = """[    0.000000] Linux version 6.12.0 (stand-in log)
[    0.120000] RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable to RETBleed attacks, data leaks possible!
[    2.266298] Run /init as init process
"""

# The report of the real one (CI, 6.12 under TCG, soft-RoCE's worker), cut short.
STRAY = """[   12.139096] ------------[ cut here ]------------
[   12.139974] WARNING: CPU: 0 PID: 94 at arch/x86/kernel/traps.c:1120 exc_debug_kernel+0xca/0x160
[   12.141524] CPU: 0 UID: 0 PID: 94 Comm: kworker/u4:3 Not tainted 6.12.117+deb12-amd64 #1
[   12.142163] RIP: 0010:exc_debug_kernel+0xca/0x160
[   12.142616] Call Trace:
[   12.143080]  <#DB>
[   12.143311]  asm_exc_debug+0x1e/0x40
[   12.143421] RIP: 0010:kmem_cache_alloc_node_noprof+0x74/0x330
[   12.143441] RSP: 0018:ff77a00cc05e3bf0 EFLAGS: 0198a782
[   12.143560]  </#DB>
[   12.150000] Kernel panic - not syncing: kernel: panic_on_warn set ...
"""

OTHER = """[   12.139096] ------------[ cut here ]------------
[   12.139974] WARNING: CPU: 0 PID: 94 at mm/slub.c:4000 kmem_cache_free+0x10/0x20
[   12.142616] Call Trace:
[   12.143311]  kfree+0x1e/0x40
[   12.150000] Kernel panic - not syncing: kernel: panic_on_warn set ...
"""

# Stands in for qemu-system-x86_64: each call plays the next outcome of
# $FAKE_QEMU_PLAN ("early", "stray", "other" or "pass") into the files run.sh reads
# (the serial log, and the guest's status and output in the tpout share).
FAKE_QEMU = r"""#!/usr/bin/env bash
set -u
serial= out=
while [ $# -gt 0 ]; do
	case "$1" in
	-serial) serial=${2#file:}; shift 2 ;;
	-virtfs) case "$2" in *mount_tag=tpout*) out=${2#local,path=}; out=${out%%,*} ;; esac; shift 2 ;;
	*) shift ;;
	esac
done
n=$(( $(cat "$FAKE_QEMU_DIR/calls" 2>/dev/null || echo 0) + 1 ))
echo $n >"$FAKE_QEMU_DIR/calls"
read -r -a plan <<<"$FAKE_QEMU_PLAN"
what=${plan[$((n - 1))]:-pass}
cat "$FAKE_QEMU_DIR/boot.log" >"$serial"
echo "guest output of boot $n" >>"$out/guest.log"
case "$what" in
early) grep -v 'Run /init' "$FAKE_QEMU_DIR/boot.log" >"$serial"; exit 0 ;;
stray) cat "$FAKE_QEMU_DIR/stray.log" >>"$serial"; exit 0 ;;
other) cat "$FAKE_QEMU_DIR/other.log" >>"$serial"; exit 0 ;;
*) echo 0 >"$out/status"; exit 1 ;;
esac
"""


def kernel_version():
    for image in sorted(glob.glob("/boot/vmlinuz-*")):
        kver = image[len("/boot/vmlinuz-"):]
        if os.path.isdir("/lib/modules/%s/kernel" % kver) and os.access(image, os.R_OK):
            return kver
    return None


@pytest.fixture
def fake_qemu(tmp_path):
    kver = kernel_version()
    if kver is None:
        pytest.skip("no readable /boot/vmlinuz-* with its modules (run.sh builds an initramfs)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    qemu = bin_dir / "qemu-system-x86_64"
    qemu.write_text(FAKE_QEMU)
    qemu.chmod(0o755)
    (tmp_path / "boot.log").write_text(BOOT)
    (tmp_path / "stray.log").write_text(STRAY)
    (tmp_path / "other.log").write_text(OTHER)

    def run(plan, accel="tcg", extra=()):
        env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]), KVER=kver,
                   TP_VM_ACCEL=accel, TP_VM_OUT=str(tmp_path / "out"), TP_VM_TIMEOUT="60",
                   FAKE_QEMU_DIR=str(tmp_path), FAKE_QEMU_PLAN=" ".join(plan))
        (tmp_path / "calls").unlink(missing_ok=True)
        p = subprocess.run([RUN, "--name", "t", *extra, "--", "true"], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=120)
        calls = int((tmp_path / "calls").read_text())
        return p, calls, tmp_path / "out" / "t"
    return run


def test_a_stray_step_trap_under_tcg_boots_the_vm_again(fake_qemu):
    p, calls, out = fake_qemu(["stray", "pass"])
    assert p.returncode == 0, p.stdout[-3000:]
    assert calls == 2
    assert "single step nothing asked for" in p.stdout and "booting once more" in p.stdout
    # The first boot's report is printed and kept, with what its guest wrote.
    assert "exc_debug_kernel" in p.stdout
    assert "exc_debug_kernel" in (out / "serial.boot1.log").read_text()
    assert (out / "guest.boot1.log").read_text() == "guest output of boot 1\n"
    assert (out / "guest.log").read_text() == "guest output of boot 2\n"


def test_a_kernel_that_died_before_init_boots_again_up_to_three_times(fake_qemu):
    p, calls, out = fake_qemu(["early", "early", "pass"])
    assert p.returncode == 0 and calls == 3, p.stdout[-3000:]
    assert p.stdout.count("died while booting, before /init") == 2
    assert (out / "serial.boot2.log").exists()
    p, calls, _ = fake_qemu(["early", "early", "early", "pass"])
    assert p.returncode != 0 and calls == 3, p.stdout[-3000:]


def test_a_second_stray_step_trap_fails_the_run(fake_qemu):
    p, calls, _ = fake_qemu(["stray", "stray", "pass"])
    assert p.returncode != 0 and calls == 2, p.stdout[-3000:]
    assert "kernel errors" in p.stdout or "without the guest reporting" in p.stdout


def test_any_other_warning_fails_at_once(fake_qemu):
    p, calls, _ = fake_qemu(["other", "pass"])
    assert p.returncode != 0 and calls == 1, p.stdout[-3000:]
    assert "kmem_cache_free" in p.stdout


def test_under_kvm_a_step_trap_is_not_the_emulators(fake_qemu):
    p, calls, _ = fake_qemu(["stray", "pass"], accel="kvm")
    assert p.returncode != 0 and calls == 1, p.stdout[-3000:]


def test_a_linked_vm_leaves_the_second_boot_to_its_pair(fake_qemu, tmp_path):
    p, calls, _ = fake_qemu(["stray", "pass"], extra=("--link-listen", str(tmp_path / "sock")))
    assert p.returncode == 75 and calls == 1, p.stdout[-3000:]
    assert "the pair boots again" in p.stdout


@pytest.mark.parametrize("log,verdict", [
    (BOOT + STRAY, 0),
    (BOOT, 1),
    (BOOT + OTHER + STRAY, 1),      # the first complaint decides
    (BOOT + STRAY.replace("  <#DB>\n", "").replace(" </#DB>\n", ""), 1),
])
def test_stray_step_trap_recognises_only_the_emulators_trap(tmp_path, log, verdict):
    f = tmp_path / "serial.log"
    f.write_text(log)
    assert subprocess.run([TRAP, str(f)]).returncode == verdict
