#!/usr/bin/env python3
"""dfs-guest.py KERNEL-ID...: memofs over a distributed filesystem, served to a guest.

For each pinned kernel (scripts/vm/kernels.tsv) and each engine of the test beds
(SeaweedFS, with a change stream; JuiceFS, without): a cluster on loopback with machines A
and B (scripts/dfs/ENGINE.sh), `memofs virtiofsd --shared-dir A` (its defaults: the
passthrough backend, `--cache=auto`), and a QEMU (TCG) guest mounting it, driven through the
benchmark harness's serial agent (bench/memofs_bench/vm.py). Checked from both sides,
through ordinary system calls: a file written in the guest shows on B; a name the guest
found missing, then created on B, shows in the guest, as does its removal, a change of its
content and a rename made on B, each within 3 s (virtio-fs cannot tell a guest of changes:
they show when its 1 s timeouts run out, with a stream or without); and the server ends
cleanly with the VM. Prints PASS/FAIL/SKIP lines and `vm-dfs-ID: N passed, N failed, N skipped`;
exits 1 when anything failed. A guest or cluster that cannot run here is skipped, or a
failure with MEMOFS_VM_REQUIRED=1. Environment: CARGO, MEMOFS_VM_CACHE.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TOP / "bench"))

from memofs_bench.tools import BenchError  # noqa: E402
from memofs_bench.vm import Guest, initramfs  # noqa: E402

import guestcheck  # noqa: E402
from guestcheck import Run, until  # noqa: E402

BEDS = TOP / "scripts" / "dfs"
# The engines the guest runs over: the bed's script name and the engine's name.
ENGINES = (("seaweedfs", "SeaweedFS"), ("juicefs", "JuiceFS"))
SEEN_WITHIN = 3.0


def in_guest_until(g: Guest, test: str, limit: float) -> float | None:
    """Seconds until the shell test `test` held in the guest, polled there every 50 ms."""
    tries = int(limit / 0.05)
    script = (f"i=0; while ! {test}; do [ $i -ge {tries} ] && exit 1; "
              f"sleep 0.05; i=$((i + 1)); done")
    rc, _, secs = g.run(script, timeout=limit + 30)
    return secs if rc == 0 else None


def seen(run: Run, name: str, secs: float | None) -> None:
    run.check(name, secs is not None,
              f"{secs:.2f} s" if secs is not None else f"not within {SEEN_WITHIN:.0f} s")


def checks(run: Run, g: Guest, b: Path) -> None:
    g.check("echo from-guest >/mnt/g1 && sync", "writing in the guest")
    seen(run, "written-in-guest-seen-on-b",
         until(lambda: (b / "g1").is_file() and (b / "g1").read_text() == "from-guest\n",
               SEEN_WITHIN))
    g.run("[ -e /mnt/b1 ]")          # the miss the guest may keep
    (b / "b1").write_text("from b\n")
    seen(run, "created-on-b-seen-in-guest",
         in_guest_until(g, '[ "$(cat /mnt/b1 2>/dev/null)" = "from b" ]', SEEN_WITHIN))
    (b / "b1").write_text("from b, longer now\n")
    seen(run, "changed-on-b-read-in-guest",
         in_guest_until(g, '[ "$(cat /mnt/b1)" = "from b, longer now" ]', SEEN_WITHIN))
    (b / "b1").rename(b / "b2")
    seen(run, "renamed-on-b-seen-in-guest",
         in_guest_until(g, "[ ! -e /mnt/b1 ] && [ -e /mnt/b2 ]", SEEN_WITHIN))
    (b / "b2").unlink()
    seen(run, "removed-on-b-gone-in-guest",
         in_guest_until(g, "[ ! -e /mnt/b2 ]", SEEN_WITHIN))


def one(kid: str, memofs: str) -> Run:
    run, k = guestcheck.begin("vm-dfs", kid)
    if k is None:
        return run
    for engine, name in ENGINES:
        run.part = f"{engine} "
        over(run, k, engine, name, memofs)
    return run


def over(run: Run, k, engine: str, name: str, memofs: str) -> None:
    """The checks in a guest of kernel `k`, served by `memofs` over `engine`'s machine A."""
    bed_script = BEDS / f"{engine}.sh"
    work = Path(tempfile.mkdtemp(prefix="memofs-vm-dfs-"))
    bed, server, g = work / "bed", None, None
    try:
        r = subprocess.run(["bash", str(bed_script), "start", str(bed)], capture_output=True,
                           text=True, timeout=300)
        if r.returncode != 0:
            run.cannot(f"the {name} bed did not start: {r.stderr.strip()[-300:]}")
            return
        sock = work / "fs.sock"
        server = subprocess.Popen([memofs, "virtiofsd", "--socket-path", str(sock),
                                   "--shared-dir", str(bed / "a")],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=open(work / "server.log", "wb"))
        if until(sock.is_socket, 10) is None:
            run.check("server-listens", False, (work / "server.log").read_text()[-300:])
            return
        g = Guest(work, k.image, initramfs(work / "initrd.cpio", {}, k), sock, 1024)
        g.check("mount -t virtiofs fs /mnt", "mounting")
        checks(run, g, bed / "b")
        g.stop()
        g = None
        code = server.wait(timeout=10)
        run.check("server-ends-cleanly", code == 0, f"exit {code}")
        server = None
    except (BenchError, OSError, subprocess.SubprocessError) as e:
        run.check("guest", False, str(e)[-400:])
    finally:
        if g is not None:
            g.stop()
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["bash", str(bed_script), "stop", str(bed)], capture_output=True,
                       timeout=120)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(guestcheck.main("dfs-guest.py", one))
