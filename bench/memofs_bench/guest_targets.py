"""Targets inside a guest: a QEMU (TCG) guest booted fresh for each mount (see vm.py), the
filesystem under test mounted on the guest's /mnt, for workloads that run in the guest (the
`guest` family). The host side serves it over virtio-fs, as a VM manager would:

- `vm-memofs[:ARGS]`: `memofs virtiofsd [ARGS]`, the mem backend;
- `vm-memofs-pt[:ARGS]`: `memofs virtiofsd --shared-dir DIR [ARGS]`, DIR a fresh host tmpfs;
- `vm-virtiofsd[:ARGS]`: `virtiofsd --shared-dir DIR [ARGS]` (virtiofsd 1.x: VIRTIOFSD, or
  `virtiofsd` on PATH or in ~/.cargo/bin; `cargo install virtiofsd` builds it, with
  libseccomp-dev and libcap-ng-dev);
- `vm-tmpfs`: the guest's own tmpfs, no device: what the guest's kernel does alone.

ARGS are the server's command line, e.g. `vm-virtiofsd:--cache=always`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from . import mounts
from .targets import (Target, TargetError, _rmdir, live_pids, memofs_version, require_memofs,
                      server_exit, stop_server)
from .tools import BenchError, ToolMissing
from .vm import Guest, GuestSetup, Kernel, initramfs, kernel

SOCKET_WAIT = 20.0


class GuestTarget(Target):
    """A guest with the filesystem under test on /mnt; `guest_setup` (the workload's kernel
    and files) is set before `mount`."""

    in_guest = True

    def __init__(self, spec: str, args: list[str], workdir: Path):
        super().__init__(spec, args, workdir)
        self.guest: Guest | None = None
        self.guest_setup: GuestSetup | None = None
        self.server: subprocess.Popen | None = None
        self.sock: Path | None = None
        self.log: Path | None = None
        self.kernel: Kernel | None = None

    # -- to be provided by kinds -----------------------------------------------------------
    def server_cmd(self, sock: Path) -> list[str] | None:
        """The host server's command line, or None for a guest without a device."""
        return None

    def guest_mount(self) -> str:
        return "mount -t virtiofs fs /mnt"

    # -- common ---------------------------------------------------------------------------
    def mount(self) -> Path:
        if self.guest_setup is None:
            raise TargetError(f"{self.spec} runs only workloads made for a guest")
        self.check()
        self.mnt = self._mkdir(f"{self.kind}-guest-")
        mounts.register_cleanup(id(self), self.unmount)
        try:
            self.kernel = kernel(self.guest_setup.kernel)
            initrd = initramfs(self.mnt / "initrd.cpio", self.guest_setup.files, self.kernel)
            self._start_server()
            self.guest = Guest(self.mnt, self.kernel.image, initrd, self.sock,
                               self.guest_setup.memory_mib, cpus=self.guest_setup.cpus)
            self.guest.check(self.guest_mount(), "mounting /mnt", timeout=60)
        except BaseException as e:
            self.unmount()
            if isinstance(e, ToolMissing):
                raise
            if isinstance(e, (BenchError, OSError, RuntimeError, subprocess.SubprocessError)):
                raise TargetError(f"starting {self.spec} failed: {e}") from e
            raise
        return self.mnt

    def _start_server(self) -> None:
        assert self.mnt is not None
        sock = self.mnt / "fs.sock"
        cmd = self.server_cmd(sock)
        if cmd is None:
            return
        self.sock, self.log = sock, self.mnt / "server.log"
        with open(self.log, "wb") as log:
            self.server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True)
        mounts.wait_for(lambda: sock.is_socket(), SOCKET_WAIT,
                        abort=lambda: server_exit(self.server, self.log),
                        what=f"{cmd[0]} to listen")

    def server_pids(self) -> list[int]:
        return live_pids(self.server)

    def unmount(self) -> None:
        with mounts.signals_deferred():
            mounts.unregister_cleanup(id(self))
            if self.guest is not None:
                self.guest.stop()
                self.guest = None
            if self.server is not None:
                # A vhost-user server ends when its VMM disconnects.
                stop_server(self.server, self.kind, self.notes, group=True)
                self.server = None
            if self.backing is not None:
                self.notes += mounts.unmount(self.backing, [])
                _rmdir(self.backing)
                self.backing = None
            if self.mnt is not None:
                shutil.rmtree(self.mnt, ignore_errors=True)
                self.mnt = None

    def describe(self) -> dict:
        pids = self.server_pids()
        setup = self.guest_setup
        return {"spec": self.spec, "kind": self.kind, "args": self.args,
                "version": self.version(), "mount": None,
                "guest": setup and {"kernel": setup.kernel,
                                    "image": str(self.kernel and self.kernel.image),
                                    "memory_mib": setup.memory_mib, "cpus": setup.cpus,
                                    "accel": "tcg"},
                "server_pids": pids,
                "server_affinity": {str(p): mounts.affinity(p) for p in pids}}


class _MemofsDevice(GuestTarget):
    def binary(self) -> str:
        return require_memofs()

    def check(self) -> None:
        self.binary()

    def version(self) -> str:
        return memofs_version(self.binary)

    def server_stats(self) -> dict | None:
        if self.sock is None or not self.server_pids():
            return None
        try:
            r = subprocess.run([self.binary(), "stats", "--json", str(self.sock)],
                               capture_output=True, text=True, timeout=10)
            return json.loads(r.stdout) if r.returncode == 0 else None
        except (OSError, ValueError, subprocess.SubprocessError):
            return None


class VmMemofs(_MemofsDevice):
    kind = "vm-memofs"
    summary = "a guest on `memofs virtiofsd [ARGS]` (the mem backend)"

    def server_cmd(self, sock: Path) -> list[str]:
        return [self.binary(), "virtiofsd", "--socket-path", str(sock), *self.args]


class VmMemofsPassthrough(_MemofsDevice):
    kind = "vm-memofs-pt"
    summary = ("a guest on `memofs virtiofsd --shared-dir DIR [ARGS]`, DIR a fresh host tmpfs "
               "(the passthrough backend)")

    def server_cmd(self, sock: Path) -> list[str]:
        return [self.binary(), "virtiofsd", "--socket-path", str(sock), "--shared-dir",
                str(self._backing_tmpfs()), *self.args]


def virtiofsd_binary() -> str | None:
    env = os.environ.get("VIRTIOFSD")
    if env:
        return env
    found = shutil.which("virtiofsd")
    if found:
        return found
    cargo = Path.home() / ".cargo" / "bin" / "virtiofsd"
    return str(cargo) if cargo.is_file() else None


class VmVirtiofsd(GuestTarget):
    kind = "vm-virtiofsd"
    summary = ("a guest on virtiofsd 1.x (`virtiofsd --shared-dir DIR [ARGS]`, DIR a fresh host "
               "tmpfs; VIRTIOFSD names the binary)")

    def check(self) -> None:
        b = virtiofsd_binary()
        if not b:
            raise ToolMissing("no virtiofsd: set VIRTIOFSD, or `cargo install virtiofsd` "
                              "(needs libseccomp-dev libcap-ng-dev)")
        r = subprocess.run([b, "--version"], capture_output=True, text=True)
        if not r.stdout.startswith("virtiofsd 1"):
            raise ToolMissing(f"{b} is not virtiofsd 1.x (it says {r.stdout.strip()[:60]!r}): "
                              "QEMU's old C virtiofsd takes other options")

    def version(self) -> str:
        b = virtiofsd_binary()
        return subprocess.run([b, "--version"], capture_output=True, text=True).stdout.strip() \
            if b else ""

    def server_cmd(self, sock: Path) -> list[str]:
        return [virtiofsd_binary() or "virtiofsd", "--socket-path", str(sock), "--shared-dir",
                str(self._backing_tmpfs()), *self.args]


class VmTmpfs(GuestTarget):
    kind = "vm-tmpfs"
    summary = "the guest's own kernel tmpfs on /mnt (no virtio-fs device)"

    def check(self) -> None:
        if self.args:
            raise TargetError("vm-tmpfs takes no arguments")

    def version(self) -> str:
        return "guest kernel tmpfs"

    def guest_mount(self) -> str:
        return "mount -t tmpfs tmpfs /mnt"


KINDS = (VmMemofs, VmMemofsPassthrough, VmVirtiofsd, VmTmpfs)
