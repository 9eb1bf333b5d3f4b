"""A guest to run workloads in: QEMU (TCG) booting a pinned kernel of scripts/vm/kernels.tsv
with a busybox initramfs whose init is an agent on the second serial port.

The agent reads a script from the port (lines between `@@RUN` and `@@END`), runs it with
`sh`, and answers with the script's last output bytes and `@@DONE STATUS`. The host times a
script from its sending to that answer: the serial exchange adds a few milliseconds, the same
for every server. The kernel's own console goes to a file kept beside the guest.

A guest takes files of the workload into its initramfs (`files`: guest path -> host path), so
that its inputs are in the guest's memory, not on the filesystem being measured.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .tools import REPO, BenchError, ToolMissing, require

VM_SCRIPTS = REPO / "scripts" / "vm"
BOOT_TIMEOUT = 180.0       # TCG boots a kernel in seconds; this is for a host under load
OUTPUT_KEPT = 4000         # bytes of a script's output sent back
# What virtio-fs needs, in load order, for kernels that build it as modules.
MODULES = ("fuse", "virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev",
           "virtio_pci", "virtiofs")

INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in /lib/modules/*.ko; do [ -e "$m" ] && insmod "$m"; done
mkdir -p /mnt /tmp
stty -F /dev/ttyS1 raw -echo
exec </dev/ttyS1 >/dev/ttyS1 2>&1
echo "@@READY"
while read -r line; do
    case $line in
        @@RUN)
            : >/tmp/script
            while read -r l && [ "$l" != "@@END" ]; do printf '%s\n' "$l" >>/tmp/script; done
            sh /tmp/script </dev/null >/tmp/out 2>&1
            rc=$?
            tail -c OUTPUT_KEPT /tmp/out
            echo "@@DONE $rc" ;;
        @@OFF) sync; poweroff -f ;;
    esac
done
poweroff -f
""".replace("OUTPUT_KEPT", str(OUTPUT_KEPT))


class GuestError(BenchError):
    pass


@dataclass
class GuestSetup:
    """What a workload asks of its guest: the kernel (an id of scripts/vm/kernels.tsv), its
    memory, files for its initramfs (guest path -> host path) and its vCPUs."""
    kernel: str
    files: dict[str, Path] = field(default_factory=dict)
    memory_mib: int = 2048
    cpus: int = 1


def binary_files(binary: str | Path, dest: str | None = None) -> dict[str, Path]:
    """A host binary and the shared libraries `ldd` lists for it, as initramfs files (guest
    path -> host path): the binary at `dest` (default: its host path), each library at the
    path the loader looks for it at, so that a dynamically linked program runs in the guest."""
    binary = Path(binary)
    files = {dest or str(binary): binary}
    r = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolMissing(f"ldd {binary}: {(r.stderr or r.stdout).strip()[-200:]}")
    for line in r.stdout.splitlines():
        # "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)" or
        # "/lib64/ld-linux-x86-64.so.2 (0x...)"
        path = next((w for w in line.split() if w.startswith("/")), None)
        if path is not None:
            files.setdefault(path, Path(path).resolve())
    return files


@dataclass
class Kernel:
    """A guest kernel's package, unpacked: its image and the modules virtio-fs needs where
    they are modules (6.1), in the order they load."""
    image: Path
    modules: list[Path]


def kernel(kernel_id: str) -> Kernel:
    """Guest kernel `kernel_id`, fetched and unpacked once (scripts/vm/fetch.sh)."""
    r = subprocess.run(["bash", str(VM_SCRIPTS / "fetch.sh"), kernel_id], capture_output=True,
                       text=True, timeout=600)
    if r.returncode != 0:
        raise ToolMissing(f"guest kernel {kernel_id}: {r.stderr.strip()[-300:]}")
    kdir = Path(r.stdout.strip())
    images = sorted(kdir.rglob("vmlinuz*"))
    if not images:
        raise ToolMissing(f"guest kernel {kernel_id}: no vmlinuz in {kdir}")
    modules = [next(iter(sorted(kdir.rglob(f"{m}.ko*"))), None) for m in MODULES]
    return Kernel(images[0], [m for m in modules if m is not None])


def _unpack_module(ko: Path, dest: Path) -> None:
    tool = {".xz": ["xz", "-dc"], ".zst": ["zstd", "-qdc"]}.get(ko.suffix)
    if tool is None:
        shutil.copy(ko, dest)
        return
    require(tool[0], f"apt-get install {tool[0]}")
    with open(dest, "wb") as f:
        subprocess.run([*tool, str(ko)], stdout=f, check=True)


def initramfs(out: Path, files: dict[str, Path], k: Kernel) -> Path:
    """The agent's initramfs with `files` (guest path -> host path) and `k`'s modules in it,
    written to `out`."""
    busybox = require("busybox", "apt-get install busybox-static")
    require("cpio", "apt-get install cpio")
    with tempfile.TemporaryDirectory(prefix="memofs-bench-initrd-", dir=out.parent) as tmp:
        root = Path(tmp)
        for d in ("bin", "dev", "proc", "sys", "mnt", "tmp"):
            (root / d).mkdir()
        shutil.copy(busybox, root / "bin" / "busybox")
        (root / "init").write_text(INIT)
        (root / "init").chmod(0o755)
        (root / "lib" / "modules").mkdir(parents=True)
        for n, ko in enumerate(k.modules):
            _unpack_module(ko, root / "lib" / "modules" / f"{n:02}-{ko.name.split('.')[0]}.ko")
        for guest, host in files.items():
            dest = root / guest.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.link(host, dest) if _same_fs(host, root) else shutil.copy(host, dest)
        listing = "\n".join(sorted(str(p.relative_to(root)) for p in root.rglob("*"))) + "\n"
        with open(out, "wb") as f:
            subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], input=listing.encode(),
                           stdout=f, cwd=root, check=True)
    return out


def _same_fs(a: Path, b: Path) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


class Guest:
    """One booted guest; `device` is the vhost-user socket of its virtio-fs device (tag `fs`),
    or None for a guest without one; `devices` more of them, as (socket, tag); `append` adds
    to the kernel's command line; `cpus` is its vCPUs (each a host thread under TCG). `qemu`
    is the QEMU binary (default: the one on PATH), `extra` more QEMU arguments. With
    `incoming` it is the destination of a live migration (`extra` holds `-incoming`): the
    agent is connected, but no @@READY awaited, since the guest arrives already running its
    agent."""

    def __init__(self, workdir: Path, image: Path, initrd: Path, device: Path | None,
                 memory_mib: int = 2048, append: str = "",
                 devices: list[tuple[Path, str]] | None = None, qemu: str | None = None,
                 extra: list[str] | None = None, incoming: bool = False, cpus: int = 1):
        self.workdir, self.console = workdir, workdir / "console.log"
        self.agent_path = workdir / "agent.sock"
        qemu = qemu or require("qemu-system-x86_64", "bash scripts/setup.sh installs it")
        cmd = [qemu, "-accel", "tcg", "-cpu", "max", "-smp", str(cpus), "-m", f"{memory_mib}M",
               "-nodefaults", "-no-reboot", "-display", "none", "-nic", "none",
               "-object", f"memory-backend-memfd,id=mem,size={memory_mib}M,share=on",
               "-numa", "node,memdev=mem",
               "-chardev", f"socket,id=agent,path={self.agent_path},server=on,wait=off",
               "-kernel", str(image), "-initrd", str(initrd),
               "-append", f"console=ttyS0 panic=-1 loglevel=4 {append}".strip(),
               "-serial", f"file:{self.console}", "-serial", "chardev:agent"]
        more = [(device, "fs")] if device is not None else []
        for i, (sock, tag) in enumerate(more + (devices or [])):
            cmd += ["-chardev", f"socket,id=fs{i},path={sock}",
                    "-device", f"vhost-user-fs-pci,queue-size=1024,chardev=fs{i},tag={tag}"]
        cmd += extra or []
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(workdir / "qemu.log", "wb"),
                                     start_new_session=True)
        self.sock: socket.socket | None = None
        self.buf = b""
        try:
            self._connect()
            if not incoming:
                self._expect(b"@@READY\n", BOOT_TIMEOUT)
        except BaseException:
            self.stop()
            raise

    def _connect(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            self._check_alive()
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(str(self.agent_path))
                self.sock = s
                return
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    raise GuestError("QEMU's agent socket did not appear within 30 s")
                time.sleep(0.05)

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise GuestError(f"QEMU exited {self.proc.returncode}: {self._tail()}")

    def _tail(self) -> str:
        text = ""
        for f in (self.workdir / "qemu.log", self.console):
            try:
                text += f.read_text(errors="replace")[-600:]
            except OSError:
                pass
        return text.strip() or "(no output)"

    def _expect(self, marker: bytes, timeout: float) -> bytes:
        """Everything up to and including `marker`, or GuestError at the deadline."""
        assert self.sock is not None
        deadline = time.monotonic() + timeout
        while marker not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise GuestError(f"no answer from the guest within {timeout:.0f} s: "
                                 f"{self._tail()}")
            self.sock.settimeout(min(left, 1.0))
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                self._check_alive()
                continue
            if not chunk:
                raise GuestError(f"the guest went away: {self._tail()}")
            self.buf += chunk
        head, _, self.buf = self.buf.partition(marker)
        return head

    def run(self, script: str, timeout: float = 1800.0) -> tuple[int, str, float]:
        """Runs `script` in the guest: (exit status, last output, seconds from send to answer)."""
        assert self.sock is not None
        body = "\n".join(line for line in script.splitlines() if line.strip())
        if "@@" in body:
            raise GuestError("a script may not contain @@")
        t0 = time.perf_counter()
        self.sock.sendall(f"@@RUN\n{body}\n@@END\n".encode())
        out = self._expect(b"@@DONE ", timeout)
        status = self._expect(b"\n", 10.0)
        secs = time.perf_counter() - t0
        return int(status.strip() or b"-1"), out.decode(errors="replace"), secs

    def check(self, script: str, what: str, timeout: float = 1800.0) -> str:
        """Runs `script`; its output, or GuestError naming `what` if it fails."""
        rc, out, _ = self.run(script, timeout)
        if rc != 0:
            raise GuestError(f"{what} failed in the guest (exit {rc}): {out.strip()[-400:]}")
        return out

    def stop(self) -> None:
        """Powers the guest off (QEMU killed if it does not end within 20 s)."""
        if self.sock is not None:
            try:
                self.sock.sendall(b"@@OFF\n")
            except OSError:
                pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        if self.sock is not None:
            self.sock.close()
            self.sock = None
