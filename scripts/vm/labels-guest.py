#!/usr/bin/env python3
"""labels-guest.py KERNEL-ID...: security labels of new files, from a guest's kernel to the host.

For each pinned kernel (scripts/vm/kernels.tsv): a QEMU (TCG) guest booted with SELinux as
its security module (`security=selinux selinux=1`, no policy loaded: SELinux enforces
nothing and labels each new file with an initial context, `unlabeled`), driven through the
benchmark harness's serial agent (bench/memofs_bench/vm.py), mounting three shared
directories served by `memofs virtiofsd`:
- `labelled`: `--security-label --xattrmap ':map:security.:trusted.virtiofs.:'
  --modcaps=+sys_admin`, virtiofsd's recipe for SELinux guests. The guest makes a file
  (CREATE), a directory (MKDIR), a symlink (SYMLINK) and a FIFO (MKNOD); on the host each
  carries `trusted.virtiofs.security.selinux` with the context the guest's kernel sent, and
  no `security.selinux`.
- `plain`: the same without `--security-label`: nothing is labelled.
- `user`: `--security-label` with the labels mapped to `user.` names, which Linux keeps on
  files and directories only: the file is made and labelled, the symlink fails (EPERM) and
  is not left on the host.
- `chroot`: `labelled` with `--sandbox=chroot`, whose server labels the FIFO and the symlink
  (which it may not open) through a working directory it borrows for each call.
Prints PASS/FAIL/SKIP lines and `vm-labels-ID: N passed, N failed, N skipped`; exits 1 when
anything failed. Environment: CARGO, MEMOFS_VM_CACHE, MEMOFS_VM_REQUIRED.
"""

from __future__ import annotations

import os
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

# The shares: name, the server's options beyond its socket and directory.
SHARES = (
    ("labelled", ["--security-label", "--modcaps=+sys_admin",
                  "--xattrmap", ":map:security.:trusted.virtiofs.:"]),
    ("plain", ["--modcaps=+sys_admin", "--xattrmap", ":map:security.:trusted.virtiofs.:"]),
    ("user", ["--security-label", "--xattrmap", ":map:security.:user.virtiofs.:"]),
    ("chroot", ["--security-label", "--modcaps=+sys_admin", "--sandbox=chroot",
                "--xattrmap", ":map:security.:trusted.virtiofs.:"]),
)
# The nodes the guest makes in each share, and how.
MAKE = "echo data >f && mkdir d && mkfifo p && ln -s f s"
LABEL = "security.selinux"


def host_label(path: Path, name: str) -> bytes | None:
    """The value of attribute `name` of `path` (not followed), None where it has none."""
    try:
        return os.getxattr(path, name, follow_symlinks=False)
    except OSError:
        return None


def checks(run: Run, g: Guest, shares: Path) -> None:
    g.check(" && ".join(f"mkdir -p /mnt/{name} && mount -t virtiofs {name} /mnt/{name}"
                        for name, _ in SHARES), "mounting")
    # SELinux's context of a process before any policy: its initial context's name (another
    # module would say otherwise, AppArmor `unconfined`).
    out = g.check("cat /proc/self/attr/current", "asking the security module")
    run.check("guest-runs-selinux", out.strip().strip("\0") == "kernel", out.strip()[-200:])
    for share in ("labelled", "plain", "chroot"):
        g.check(f"cd /mnt/{share} && {MAKE}", f"making nodes in {share}")
    mapped = "trusted.virtiofs." + LABEL
    for node in ("f", "d", "p", "s"):
        for share in ("labelled", "chroot"):
            got = host_label(shares / share / node, mapped)
            run.check(f"{share}-{node}", got is not None and got.rstrip(b"\0") != b"",
                      repr(got))
            raw = host_label(shares / share / node, LABEL)
            run.check(f"{share}-{node}-not-as-security", raw is None, repr(raw))
        plain = host_label(shares / "plain" / node, mapped)
        run.check(f"plain-{node}-unlabelled", plain is None, repr(plain))
    # Linux keeps user. attributes on files and directories only.
    rc, out, _ = g.run("cd /mnt/user && echo data >f && ln -s f s")
    run.check("user-symlink-refused", rc != 0 and "ermitted" in out, out.strip()[-200:])
    run.check("user-file-labelled",
              host_label(shares / "user" / "f", "user.virtiofs." + LABEL) is not None)
    run.check("user-symlink-not-left", not os.path.lexists(shares / "user" / "s"))
    g.check("umount " + " ".join(f"/mnt/{name}" for name, _ in SHARES), "unmounting")


def one(kid: str, memofs: str) -> Run:
    run, k = guestcheck.begin("vm-labels", kid)
    if k is None:
        return run
    work = Path(tempfile.mkdtemp(prefix="memofs-vm-labels-"))
    servers: list[subprocess.Popen] = []
    g = None
    try:
        devices = []
        for name, opts in SHARES:
            (work / "shares" / name).mkdir(parents=True)
            sock = work / f"{name}.sock"
            servers.append(subprocess.Popen(
                [memofs, "virtiofsd", "--socket-path", str(sock),
                 "--shared-dir", str(work / "shares" / name), *opts],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=open(work / f"{name}.log", "wb")))
            if until(sock.is_socket, 10) is None:
                run.check(f"{name}-server-listens", False,
                          (work / f"{name}.log").read_text()[-300:])
                return run
            devices.append((sock, name))
        g = Guest(work, k.image, initramfs(work / "initrd.cpio", {}, k), None, 1024,
                  append="security=selinux selinux=1", devices=devices)
        checks(run, g, work / "shares")
        g.stop()
        g = None
        for (name, _), server in zip(SHARES, servers):
            code = server.wait(timeout=10)
            run.check(f"{name}-server-ends-cleanly", code == 0, f"exit {code}")
        servers = []
    except (BenchError, OSError, subprocess.SubprocessError) as e:
        run.check("guest", False, str(e)[-400:])
    finally:
        if g is not None:
            g.stop()
        for server in servers:
            server.kill()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)
    return run


if __name__ == "__main__":
    sys.exit(guestcheck.main("labels-guest.py", one))
