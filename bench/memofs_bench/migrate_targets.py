"""Targets the migrate family moves between two QEMUs: a virtio-fs device whose servers the
workload starts itself, two at a time (the VM's source and its destination, see
migration.py), from the command line the target gives:

- `mig-memofs[:ARGS]`: `memofs virtiofsd [ARGS]`, the mem backend, its files in the VM's
  state;
- `mig-memofs-ahead[:ARGS]`: the same, the files' data sent ahead to the destination's server
  before QEMU migrates (`memofs migrate` to its `--migration-listen`);
- `mig-memofs-pt[:ARGS]`: `memofs virtiofsd --shared-dir DIR [ARGS]`, both servers exporting
  DIR, a fresh host tmpfs;
- `mig-virtiofsd[:ARGS]`: `virtiofsd --shared-dir DIR --sandbox none [ARGS]` (virtiofsd 1.x,
  as for vm-virtiofsd).

Mounting one only makes its work directory: nothing is served until the workload starts it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .guest_targets import virtiofsd_binary
from .targets import Target, memofs_version, require_memofs
from .tools import ToolMissing


class MigrationTarget(Target):
    """A device the migrate workload serves and moves; `shared` when it exports a host
    directory, `ahead` when the files' data goes ahead of the VM's state."""

    moves = True
    shared = False
    ahead = False
    virtiofsd = False

    def mount(self) -> Path:
        self.check()
        self.mnt = self._mkdir(f"{self.kind}-")
        return self.mnt

    def unmount(self) -> None:
        if self.mnt is not None:
            shutil.rmtree(self.mnt, ignore_errors=True)
            self.mnt = None

    def check(self) -> None:
        require_memofs()

    def version(self) -> str:
        return memofs_version(require_memofs)

    def describe(self) -> dict:
        return {"spec": self.spec, "kind": self.kind, "args": self.args,
                "version": self.version(), "mount": None}


class MigMemofs(MigrationTarget):
    kind = "mig-memofs"
    summary = "`memofs virtiofsd [ARGS]` moved with its VM (the mem backend: files in its state)"


class MigMemofsAhead(MigrationTarget):
    kind = "mig-memofs-ahead"
    summary = ("`memofs virtiofsd [ARGS]` moved with its VM, the files' data sent ahead of the "
               "state (`memofs migrate` to the destination's --migration-listen)")
    ahead = True


class MigMemofsPt(MigrationTarget):
    kind = "mig-memofs-pt"
    summary = "`memofs virtiofsd --shared-dir DIR [ARGS]` moved with its VM (files stay on the host)"
    shared = True


class MigVirtiofsd(MigrationTarget):
    kind = "mig-virtiofsd"
    summary = "`virtiofsd --shared-dir DIR --sandbox none [ARGS]` moved with its VM (virtiofsd 1.x)"
    shared = True
    virtiofsd = True

    def check(self) -> None:
        if virtiofsd_binary() is None:
            raise ToolMissing("no virtiofsd: set VIRTIOFSD, or `cargo install virtiofsd`")

    def version(self) -> str:
        b = virtiofsd_binary()
        return subprocess.run([b, "--version"], capture_output=True, text=True).stdout.strip() \
            if b else ""


KINDS = (MigMemofs, MigMemofsAhead, MigMemofsPt, MigVirtiofsd)
