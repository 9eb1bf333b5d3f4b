"""Two QEMUs and their vhost-user-fs servers for a live migration: what the live-migration
test (scripts/vm/migrate-guest.py) and the migrate family (workloads/migrate.py) share.

A `Bed` starts servers (`memofs virtiofsd`, or virtiofsd) and QEMUs (QEMU 10.0.2 from
scripts/vm/qemu.sh: the vhost-user back-end state transfer needs 8.2 or later) booting the
serial-agent guest of vm.py with a QMP socket, the destination waiting with `-incoming
defer`; both QEMUs have the `return-path` capability, without which a source cannot learn
that the destination refused the state, and would stop the VM for good. `ended` ends every
process and `remove` the files.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import qmp
from .qmp import QMP
from .tools import REPO, ToolMissing, until
from .vm import Guest, Kernel

# Guest memory: what QEMU's own pre-copy moves besides the device's state.
MEMORY_MIB = 512


class ServerError(Exception):
    """A server that did not start: its own words."""


@dataclass
class Server:
    proc: subprocess.Popen
    sock: Path
    log: Path


@dataclass
class VM:
    guest: Guest
    qmp: QMP


@dataclass
class Env:
    """What every bed of one kernel uses."""
    memofs: str
    qemu: str
    kernel: Kernel
    initrd: Path
    virtiofsd: str | None


def qemu10() -> str:
    """The QEMU 10.0.2 wrapper scripts/vm/qemu.sh unpacks (ToolMissing where it cannot)."""
    r = subprocess.run(["bash", str(REPO / "scripts" / "vm" / "qemu.sh")], capture_output=True,
                       text=True, timeout=1800)
    if r.returncode != 0:
        raise ToolMissing(r.stderr.strip()[-300:] or "scripts/vm/qemu.sh failed")
    return r.stdout.strip()


def tail(path: Path, n: int = 400) -> str:
    try:
        return " ".join(path.read_text(errors="replace").split())[-n:] or "(nothing)"
    except OSError:
        return "(no file)"


class Bed:
    """One migration's servers, QEMUs and files, ended by `end`, removed by `remove`."""

    def __init__(self, env: Env, name: str):
        self.env, self.n = env, 0
        self.work = Path(tempfile.mkdtemp(prefix=f"memofs-vm-migrate-{name}-"))
        self.servers: list[Server] = []
        self.vms: list[VM] = []

    def _next(self) -> int:
        self.n += 1
        return self.n

    def server(self, args: list[str], virtiofsd: bool = False) -> Server:
        """A server with `args` beyond its socket, listening (else ServerError)."""
        n = self._next()
        sock, log = self.work / f"fs{n}.sock", self.work / f"server{n}.log"
        if virtiofsd:
            if self.env.virtiofsd is None:
                raise ToolMissing("no virtiofsd (cargo install virtiofsd)")
            cmd = [self.env.virtiofsd, "--socket-path", str(sock), "--sandbox", "none"]
        else:
            cmd = [self.env.memofs, "virtiofsd", "--socket-path", str(sock)]
        with open(log, "wb") as err:
            proc = subprocess.Popen([*cmd, "--log-level", "info", *args],
                                    stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        s = Server(proc, sock, log)
        self.servers.append(s)
        until(lambda: sock.is_socket() or proc.poll() is not None, 30)
        if proc.poll() is not None or not sock.is_socket():
            raise ServerError(f"exit {proc.poll()}: {tail(log)}")
        return s

    def vm(self, server: Server, incoming: bool = False) -> VM:
        """A QEMU on `server`: booted to its agent, or waiting for a migration."""
        d = self.work / f"vm{self._next()}"
        d.mkdir()
        extra = ["-qmp", f"unix:{d / 'qmp.sock'},server=on,wait=off"]
        extra += ["-incoming", "defer"] if incoming else []
        g = Guest(d, self.env.kernel.image, self.env.initrd, server.sock, MEMORY_MIB,
                  qemu=self.env.qemu, extra=extra, incoming=incoming)
        vm = VM(g, None)  # type: ignore[arg-type]
        self.vms.append(vm)
        vm.qmp = QMP(d / "qmp.sock", alive=lambda: g.proc.poll() is None)
        vm.qmp.cmd("migrate-set-capabilities",
                   capabilities=[{"capability": "return-path", "state": True}])
        return vm

    def migrate(self, src: VM, dst: VM) -> dict:
        """Migrates `src` to `dst`: query-migrate's last answer (`status`, `downtime`,
        `total-time`), and its `blocked-reasons` before it started."""
        blocked = qmp.blockers(src.qmp)
        info = qmp.migrate(src.qmp, dst.qmp, f"unix:{self.work / f'mig{self._next()}.sock'}")
        return {**info, "blocked-reasons": blocked}

    def quit(self, vm: VM) -> None:
        """Ends a QEMU by QMP `quit` (killed if it lingers)."""
        vm.qmp.quit()
        try:
            vm.guest.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        vm.guest.stop()

    def end(self) -> None:
        """Ends every QEMU, then every server (killed where it does not end by itself)."""
        for vm in self.vms:
            if vm.qmp is not None:
                vm.qmp.close()
            if vm.guest.proc.poll() is None:
                os.killpg(vm.guest.proc.pid, signal.SIGKILL)
            vm.guest.stop()
        for s in self.servers:
            if until(lambda: s.proc.poll() is not None, 10) is None:
                s.proc.kill()
            s.proc.wait()

    def remove(self, keep_logs: bool = False) -> None:
        """Removes the files; the logs of servers and QEMUs first copied aside if asked."""
        if keep_logs:
            kept = Path(tempfile.mkdtemp(prefix=f"{self.work.name}-logs-"))
            for p in self.work.rglob("*.log"):
                shutil.copy(p, kept / "-".join(p.relative_to(self.work).parts))
            print(f"    logs kept in {kept}", flush=True)
        shutil.rmtree(self.work, ignore_errors=True)


def state_bytes(server: Server, what: str) -> int | None:
    """The bytes of the state a memofs server logged it `saved` or `loaded`."""
    for line in server.log.read_text(errors="replace").splitlines():
        if f"state {what}:" in line and "bytes" in line:
            return int(line.rsplit(",", 1)[1].split()[0])
    return None
