"""Targets: named configurations of how to bring a filesystem up and down.

A target spec is `KIND` or `KIND:ARGS`, ARGS being passed to the mount command, e.g.
`memofs:-o negative_timeout=0` or `passthrough_ll:-o timeout=10`. Every mount is made fresh on a
temporary mount point and always unmounted (context manager + atexit + deferred signals).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import ClassVar

from . import libfuse, mounts
from .tools import REPO, BenchError, ToolMissing, compile_c, require


class TargetError(BenchError):
    pass


class Target:
    kind: ClassVar[str]
    summary: ClassVar[str]
    fstype: ClassVar[str] = ""
    in_guest: ClassVar[bool] = False    # the filesystem is mounted in a guest (guest_targets)
    moves: ClassVar[bool] = False       # a device the workload moves between VMs (migrate_targets)

    def __init__(self, spec: str, args: list[str], workdir: Path):
        self.spec, self.args, self.workdir = spec, args, workdir
        self.mnt: Path | None = None
        self.backing: Path | None = None
        # The host directory the mount exports, if not the whole backing tmpfs.
        self.export: Path | None = None
        self.notes: list[str] = []

    def source(self) -> Path | None:
        """The host directory behind the mount, if any."""
        return self.export or self.backing

    def peer(self) -> Path | None:
        """Another machine's view of the same files (a distributed filesystem's second
        client), if the target has one."""
        return None

    # -- to be provided by kinds -----------------------------------------------------------
    def check(self) -> None:
        """Raise ToolMissing/TargetError if this target cannot be mounted here."""

    def version(self) -> str:
        return ""

    def _mount(self, mnt: Path) -> None:
        raise NotImplementedError

    def _unmount_cmds(self, mnt: Path) -> list[list[str]]:
        return [["umount", str(mnt)]]

    def server_pids(self) -> list[int]:
        return []

    def _stop_server(self) -> None:
        pass

    def server_stats(self) -> dict | None:
        """Counters the server reports about itself, if it can (memofs stats --json)."""
        return None

    # -- common ---------------------------------------------------------------------------
    def _mkdir(self, prefix: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.workdir))

    def _backing_tmpfs(self) -> Path:
        """A fresh kernel tmpfs for FUSE servers that pass through to a directory."""
        self.backing = self._mkdir(f"{self.kind}-backing-")
        r = subprocess.run(["mount", "-t", "tmpfs", "memofs-bench-backing", str(self.backing)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise TargetError(f"cannot mount the backing tmpfs: {r.stderr.strip()}")
        return self.backing

    def mount(self) -> Path:
        self.check()
        mnt = self._mkdir(f"{self.kind}-mnt-")
        self.mnt = mnt
        mounts.register_cleanup(id(self), self.unmount)
        try:
            self._mount(mnt)
            mounts.wait_mounted(mnt, fstype_prefix=self.fstype, abort=self._server_died)
        except BaseException as e:
            self.unmount()
            if isinstance(e, (BenchError, RuntimeError, TimeoutError, OSError,
                              subprocess.SubprocessError)):
                raise TargetError(f"mounting {self.spec} failed: {e}") from e
            raise
        return mnt

    def _server_died(self) -> str | None:
        return None

    def unmount(self) -> None:
        with mounts.signals_deferred():
            mounts.unregister_cleanup(id(self))
            if self.mnt is not None:
                self.notes += mounts.unmount(self.mnt, self._unmount_cmds(self.mnt))
                self._stop_server()
                _rmdir(self.mnt)
                self.mnt = None
            if self.backing is not None:
                self.notes += mounts.unmount(self.backing, [])
                _rmdir(self.backing)
                self.backing = None
                self.export = None

    def __enter__(self) -> Path:
        return self.mount()

    def __exit__(self, *exc) -> None:
        self.unmount()

    def describe(self) -> dict:
        entry = mounts.mount_entry(self.mnt) if self.mnt else None
        pids = self.server_pids()
        return {"spec": self.spec, "kind": self.kind, "args": self.args,
                "version": self.version(),
                "mount": entry and {k: entry[k] for k in ("fstype", "source", "options",
                                                          "super_options")},
                "server_pids": pids,
                "server_affinity": {str(p): mounts.affinity(p) for p in pids}}


def _rmdir(p: Path) -> None:
    try:
        p.rmdir()
    except OSError:
        pass


def server_exit(proc: subprocess.Popen | None, log: Path | None) -> str | None:
    """Why a server process we started has ended, if it has: its status and its log's end."""
    if proc is None or proc.poll() is None:
        return None
    try:
        tail = log.read_text(errors="replace").strip()[-500:] if log else ""
    except OSError:
        tail = ""
    return f"server exited with status {proc.returncode}: {tail or '(no output)'}"


def live_pids(proc: subprocess.Popen | None) -> list[int]:
    return [proc.pid] if proc is not None and proc.poll() is None else []


def stop_server(proc: subprocess.Popen, kind: str, notes: list[str], group: bool = False) -> None:
    """Waits up to 10 s for a server we started to end on its own (once unmounted, or its
    VMM gone), else kills it (with `group`, its whole process group) and says so in `notes`."""
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        notes.append(f"{kind} server {proc.pid} did not exit; killed it")
        if group:
            os.killpg(proc.pid, 9)
        else:
            proc.kill()
        proc.wait()


class ProcessServer(Target):
    """A FUSE server we start in the foreground (-f) and own as a child process."""

    fstype = "fuse"

    def __init__(self, *a):
        super().__init__(*a)
        self.proc: subprocess.Popen | None = None
        self.log: Path | None = None

    def command(self, mnt: Path, backing: Path) -> list[str]:
        raise NotImplementedError

    def _mount(self, mnt: Path) -> None:
        backing = self._backing_tmpfs()
        self.log = Path(self.workdir) / f"{mnt.name}.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.command(mnt, backing), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)

    def _server_died(self) -> str | None:
        return server_exit(self.proc, self.log)

    def _unmount_cmds(self, mnt: Path) -> list[list[str]]:
        return [["fusermount3", "-u", str(mnt)], ["umount", str(mnt)]]

    def server_pids(self) -> list[int]:
        return live_pids(self.proc)

    def _stop_server(self) -> None:
        if self.proc is None:
            return
        stop_server(self.proc, self.kind, self.notes)
        self.proc = None
        if self.log:
            self.log.unlink(missing_ok=True)


class Tmpfs(Target):
    kind, summary, fstype = "tmpfs", "kernel tmpfs (the in-kernel reference)", "tmpfs"

    def version(self) -> str:
        return "kernel " + os.uname().release

    def _mount(self, mnt: Path) -> None:
        r = subprocess.run(["mount", "-t", "tmpfs", *self.args, "memofs-bench", str(mnt)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise TargetError(f"mount -t tmpfs failed: {r.stderr.strip()}")


PASSTHROUGH_SRC = Path("/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c")


class PassthroughLL(ProcessServer):
    kind = "passthrough_ll"
    summary = "libfuse's passthrough_ll example over a fresh tmpfs directory"

    def check(self) -> None:
        require("fusermount3", "apt-get install fuse3")
        self.binary()

    def binary(self) -> Path:
        if not PASSTHROUGH_SRC.exists():
            raise ToolMissing(f"{PASSTHROUGH_SRC} is missing: apt-get install libfuse3-dev")
        require("pkg-config", "apt-get install pkg-config")
        pc = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"],
                            capture_output=True, text=True)
        if pc.returncode != 0:
            raise ToolMissing("pkg-config knows no fuse3: apt-get install libfuse3-dev")
        flags = pc.stdout.split()
        return compile_c("passthrough_ll", [PASSTHROUGH_SRC],
                         ["-DHAVE_FALLOCATE", "-DHAVE_POSIX_FALLOCATE", "-DHAVE_COPY_FILE_RANGE",
                          f"-I{PASSTHROUGH_SRC.parent}", *[f for f in flags if not f.startswith("-l")]],
                         [f for f in flags if f.startswith("-l")])

    def version(self) -> str:
        r = subprocess.run(["pkg-config", "--modversion", "fuse3"], capture_output=True, text=True)
        return "libfuse " + r.stdout.strip()

    def command(self, mnt: Path, backing: Path) -> list[str]:
        return [str(self.binary()), "-f", "-o", f"source={backing}", *self.args, str(mnt)]


class PassthroughHP(ProcessServer):
    kind = "passthrough_hp"
    summary = ("libfuse's passthrough_hp (libfuse 3.18, built with io_uring: `-o io_uring` "
               "serves requests through FUSE-over-io_uring) over a fresh tmpfs directory")

    def check(self) -> None:
        require("fusermount3", "apt-get install fuse3")
        libfuse.passthrough_hp()

    def version(self) -> str:
        return "libfuse " + libfuse.UPSTREAM

    def command(self, mnt: Path, backing: Path) -> list[str]:
        return [str(libfuse.passthrough_hp()), "--foreground", *self.args, str(backing),
                str(mnt)]


class Bindfs(ProcessServer):
    kind, summary = "bindfs", "bindfs over a fresh tmpfs directory"

    def check(self) -> None:
        require("bindfs", "apt-get install bindfs")

    def version(self) -> str:
        r = subprocess.run(["bindfs", "--version"], capture_output=True, text=True)
        return r.stdout.strip()

    def command(self, mnt: Path, backing: Path) -> list[str]:
        return ["bindfs", "-f", *self.args, str(backing), str(mnt)]


def memofs_binary() -> str | None:
    """$MEMOFS_BIN, else the workspace's target/release or target/debug build, else PATH."""
    env = os.environ.get("MEMOFS_BIN")
    if env:
        return env
    for profile in ("release", "debug"):
        p = REPO / "target" / profile / "memofs"
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which("memofs")


def require_memofs(override: str | None = None) -> str:
    """The memofs binary to run (`override`, else as `memofs_binary` finds it)."""
    b = override or memofs_binary()
    if not b:
        raise ToolMissing("no memofs binary: set MEMOFS_BIN, build target/release/memofs, "
                          "or put memofs on PATH")
    return b


def memofs_version(binary) -> str:
    """What `binary() --version` says."""
    try:
        r = subprocess.run([binary(), "--version"], capture_output=True, text=True, timeout=10)
        return (r.stdout or r.stderr).strip() or f"exit {r.returncode}"
    except (OSError, BenchError, subprocess.SubprocessError) as e:
        return f"unknown ({e})"


class Memofs(Target):
    kind, summary, fstype = "memofs", ("the memofs server (`memofs mount [ARGS] MNT`; "
                                       "`--bin=PATH` among ARGS runs another build)"), "fuse"

    def __init__(self, spec: str, args: list[str], workdir: Path):
        bins = [a.split("=", 1)[1] for a in args if a.startswith("--bin=")]
        self.bin_override = bins[-1] if bins else None
        super().__init__(spec, [a for a in args if not a.startswith("--bin=")], workdir)

    def binary(self) -> str:
        return require_memofs(self.bin_override)

    def check(self) -> None:
        self.binary()

    def version(self) -> str:
        return memofs_version(self.binary)

    def _mount(self, mnt: Path) -> None:
        self._run_mount([self.binary(), "mount", *self.args, str(mnt)])

    def _run_mount(self, cmd: list[str]) -> None:
        try:
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=60)
        except subprocess.TimeoutExpired as e:
            raise TargetError(f"`{shlex.join(cmd)}` did not return within 60 s") from e
        if r.returncode != 0:
            raise TargetError(f"`{shlex.join(cmd)}` exited {r.returncode}: "
                              f"{(r.stderr or r.stdout).strip()[-500:] or '(no output)'}")

    def _unmount_cmds(self, mnt: Path) -> list[list[str]]:
        return [[self.binary(), "umount", str(mnt)], ["fusermount3", "-u", str(mnt)]]

    def server_stats(self) -> dict | None:
        if self.mnt is None:
            return None
        try:
            r = subprocess.run([self.binary(), "stats", "--json", str(self.mnt)],
                               capture_output=True, text=True, timeout=10)
            return json.loads(r.stdout) if r.returncode == 0 else None
        except (OSError, ValueError, BenchError, subprocess.SubprocessError):
            return None

    def server_pids(self) -> list[int]:
        if self.mnt is None:
            return []
        return [p for p in mounts.pids_with_arg(str(self.mnt))
                if "memofs" in _argv0(p)]

    def unmount(self) -> None:
        pids = self.server_pids()
        super().unmount()
        # the server should exit once unmounted; do not leave one behind
        try:
            mounts.wait_for(lambda: not any(_alive(p) for p in pids), 10, what="memofs to exit")
        except TimeoutError:
            for p in pids:
                if _alive(p):
                    self.notes.append(f"memofs server {p} still running after unmount; "
                                      "sent SIGTERM")
                    os.kill(p, 15)


class MemofsPassthrough(Memofs):
    kind = "memofs-pt"
    summary = "memofs's passthrough backend over a fresh tmpfs (`memofs mount [ARGS] DIR MNT`)"

    def _mount(self, mnt: Path) -> None:
        self._run_mount([self.binary(), "mount", *self.args, str(self._backing_tmpfs()),
                         str(mnt)])


class MemofsPassthroughSub(Memofs):
    kind = "memofs-ptsub"
    summary = ("memofs's passthrough backend exporting a directory inside a fresh tmpfs, as a "
               "share inside a larger filesystem is (`memofs mount [ARGS] DIR/export MNT`)")

    def _mount(self, mnt: Path) -> None:
        self.export = self._backing_tmpfs() / "export"
        self.export.mkdir()
        self._run_mount([self.binary(), "mount", *self.args, str(self.export), str(mnt)])


FUSE_CONF = Path("/etc/fuse.conf")
DEV_FUSE = Path("/dev/fuse")


class MemofsUser(Memofs):
    kind = "memofs-user"
    summary = ("memofs served by an unprivileged user ($MEMOFS_BENCH_USER, default nobody), "
               "mounted through fusermount3 as that user would (`memofs mount -o allow_other,"
               "uid=0,gid=0 [ARGS] MNT`: the benchmark, as root, owns the mount's root as a user "
               "owns their mount); for the run, /dev/fuse is made usable by that user and "
               "/etc/fuse.conf gets user_allow_other (so the benchmark, as root, can use the "
               "mount), both restored at unmount")

    def __init__(self, spec: str, args: list[str], workdir: Path):
        super().__init__(spec, args, workdir)
        self.user = os.environ.get("MEMOFS_BENCH_USER", "nobody")
        self._restore: list[tuple[str, object]] = []
        self._copy: Path | None = None

    def user_binary(self) -> str:
        """The binary as the user can run it: a copy in a directory they can reach where they
        cannot reach the build (a checkout in a private home directory)."""
        binary = self.binary()
        if subprocess.run(self._as_user(["test", "-x", binary])).returncode == 0:
            return binary
        if self._copy is None:
            d = Path(tempfile.mkdtemp(prefix="memofs-bench-bin-"))
            d.chmod(0o755)
            shutil.copy2(binary, d / "memofs")
            self._copy = d / "memofs"
        return str(self._copy)

    def _ids(self) -> tuple[int, int]:
        import pwd
        try:
            pw = pwd.getpwnam(self.user)
        except KeyError as e:
            raise TargetError(f"no user {self.user!r} (MEMOFS_BENCH_USER)") from e
        return pw.pw_uid, pw.pw_gid

    def _as_user(self, cmd: list[str]) -> list[str]:
        uid, gid = self._ids()
        return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *cmd]

    def check(self) -> None:
        super().check()
        self._ids()
        require("setpriv")
        require("fusermount3")

    def _mkdir(self, prefix: str) -> Path:
        # The user must reach the mount point: in the system's temporary directory, not in
        # the run's working directory (which other users may not traverse).
        return Path(tempfile.mkdtemp(prefix=f"memofs-bench-{prefix}"))

    def _prepare_host(self) -> None:
        """What a desktop Debian has and a server may lack: /dev/fuse open to users, and
        user_allow_other. Set for the run, remembered for unmount."""
        mode = DEV_FUSE.stat().st_mode & 0o777
        if mode & 0o006 != 0o006:
            self._restore.append(("chmod", mode))
            os.chmod(DEV_FUSE, mode | 0o666)
        conf = FUSE_CONF.read_text() if FUSE_CONF.exists() else None
        lines = [ln.split("#", 1)[0].strip() for ln in (conf or "").splitlines()]
        if "user_allow_other" not in lines:
            self._restore.append(("conf", conf))
            FUSE_CONF.write_text((conf or "") + ("" if not conf or conf.endswith("\n")
                                                 else "\n") + "user_allow_other\n")

    def _restore_host(self) -> None:
        if self._copy is not None:
            shutil.rmtree(self._copy.parent, ignore_errors=True)
            self._copy = None
        for what, old in reversed(self._restore):
            if what == "chmod":
                os.chmod(DEV_FUSE, old)
            elif old is None:
                FUSE_CONF.unlink(missing_ok=True)
            else:
                FUSE_CONF.write_text(old)
        self._restore = []

    def _mount(self, mnt: Path) -> None:
        uid, gid = self._ids()
        self._prepare_host()
        os.chown(mnt, uid, gid)
        # The mount's root belongs to the benchmark's user (root), as a user's own mount
        # belongs to them: a workload then works in directories it owns, as that user would,
        # and the kernel checks no ACL of a directory owned by somebody else on every walk.
        owner = f"allow_other,uid={os.geteuid()},gid={os.getegid()}"
        self._run_mount(self._as_user([self.user_binary(), "mount", "-o", owner, *self.args,
                                       str(mnt)]))

    def _unmount_cmds(self, mnt: Path) -> list[list[str]]:
        return [self._as_user([self.user_binary(), "umount", str(mnt)]), ["umount", str(mnt)]]

    def server_stats(self) -> dict | None:
        if self.mnt is None:
            return None
        try:
            r = subprocess.run(self._as_user([self.user_binary(), "stats", "--json", str(self.mnt)]),
                               capture_output=True, text=True, timeout=10)
            return json.loads(r.stdout) if r.returncode == 0 else None
        except (OSError, ValueError, BenchError, subprocess.SubprocessError):
            return None

    def unmount(self) -> None:
        try:
            super().unmount()
        finally:
            self._restore_host()


def _argv0(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return st.rsplit(")", 1)[-1].split()[0] != "Z"


from .dfs_targets import (JuiceFs, MemofsJuiceFs, MemofsSeaweedFs,  # noqa: E402 (they build
                          SeaweedFs)  # on the above)
from .guest_targets import KINDS as GUEST_KINDS  # noqa: E402
from .migrate_targets import KINDS as MIGRATION_KINDS  # noqa: E402

KINDS: dict[str, type[Target]] = {k.kind: k for k in (Memofs, MemofsPassthrough,
                                                       MemofsPassthroughSub, MemofsUser,
                                                       Tmpfs, PassthroughLL, PassthroughHP,
                                                       Bindfs, SeaweedFs, MemofsSeaweedFs,
                                                       JuiceFs, MemofsJuiceFs,
                                                       *GUEST_KINDS, *MIGRATION_KINDS)}


class UnknownTarget(ValueError):
    pass


def split_specs(text: str) -> list[str]:
    """Split `--targets` on commas, except commas inside a `-o a=1,b=2` option list: a piece
    continues the previous spec if that spec has arguments and the piece neither names a known
    kind nor has a ':' of its own."""
    specs: list[str] = []
    for piece in text.split(","):
        kind = piece.split(":", 1)[0].strip()
        if specs and ":" in specs[-1] and ":" not in piece and kind not in KINDS:
            specs[-1] += "," + piece
        else:
            specs.append(piece.strip())
    return [s for s in specs if s]


def parse_spec(spec: str) -> tuple[str, list[str]]:
    kind, _, rest = spec.partition(":")
    kind = kind.strip()
    if kind not in KINDS:
        raise UnknownTarget(f"unknown target kind {kind!r} in {spec!r}; "
                            f"known kinds: {', '.join(KINDS)}")
    try:
        return kind, shlex.split(rest)
    except ValueError as e:
        raise UnknownTarget(f"cannot parse the arguments of {spec!r}: {e}") from e


def make_target(spec: str, workdir: Path) -> Target:
    kind, args = parse_spec(spec)
    return KINDS[kind](spec, args, workdir)


def canonical(spec: str) -> str:
    kind, args = parse_spec(spec)
    return kind + (":" + shlex.join(args) if args else "")

