#!/usr/bin/env python3
"""managers.py KERNEL-ID...: memofs started by the command lines VM managers build for virtiofsd.

Each line below is what a manager's source builds (libvirt's qemuVirtioFSBuildCommandLine in
both option styles, Kata's Go runtime and runtime-rs with their default extra arguments,
KubeVirt's virtiofs container, Incus's and LXD's DiskVMVirtiofsdStart, Proxmox's
start_virtiofsd, cloud-hypervisor's docs and tests), with the paths filled in, run as the
manager runs it: under the name memofs-virtiofsd, as the user the manager uses, with the
listening socket handed over as the descriptor the manager passes, with a system log to
write to where the line says --syslog. Each must come up (its readiness line on standard
error or in the system log, or its socket file), serve a VMM that connects
(memofs-vhost-probe: INIT, a file read back) and end when the VMM leaves. Then the options
those lines pass are checked by what they do, each against a run without it: the thread pool's
workers, the tag in the device's configuration space, O_DIRECT on the host file, O_NOATIME
kept, CAP_DAC_READ_SEARCH left out, the writeback cache and security labels negotiated, the
user namespace's id map, a server that cannot log where it was told to refusing to start. Last,
a guest (QEMU TCG, each kernel given) boots on libvirt's and Kata's lines, mounts the tag and
passes the checks every device passes (scripts/vm/fs-checks.sh).

Prints PASS/FAIL/SKIP lines and `vm-managers-ID: N passed, N failed, N skipped`; exits 1 when
anything failed. Needs root. Environment: CARGO, MEMOFS_VM_CACHE.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TOP / "bench"))

from memofs_bench.tools import BenchError  # noqa: E402
from memofs_bench.vm import Guest, initramfs  # noqa: E402

import guestcheck  # noqa: E402
from guestcheck import Run, until  # noqa: E402

READY = "Waiting for vhost-user socket connection"
# KubeVirt's virtiofs container user (util.NonRootUID).
KUBEVIRT_UID = 107
# The user scripts/setup.sh makes with subordinate ids (libvirt's session mode maps them).
SESSION_USER = "memofs-podman"


@dataclass
class Line:
    """One manager's command line: `argv` after the program, with {DIR}, {DIR_ESC} (commas
    doubled, as libvirt escapes them), {SOCK}, {FD}, {UID}, {GID}, {SUB} filled in. `fd`: the
    descriptor the manager hands the listening socket over as (None: the server makes the
    socket at {SOCK}); `user`: who runs it (None: root); `cwd`: {SOCK}'s directory is the
    working directory (runtime-rs rootless passes a bare file name); `guest`: a guest boots on
    it."""
    manager: str
    variant: str
    argv: list[str]
    fd: int | None = None
    user: str | None = None
    cwd: bool = False
    guest: bool = False

    @property
    def name(self) -> str:
        return f"{self.manager}-{self.variant}"

    @property
    def syslog(self) -> bool:
        return "--syslog" in self.argv


# KubeVirt's virtiofs container (pkg/virt-controller/services/virtiofs.go), and the rule it
# adds for a service account's volume.
KUBEVIRT = ["--socket-path={SOCK}", "--shared-dir={DIR}", "--sandbox=none", "--cache=auto",
            "--migration-on-error=guest-error", "--migration-mode=find-paths"]
KUBEVIRT_SA = f"--translate-uid=host:{KUBEVIRT_UID}:0:1"

LINES = [
    Line("libvirt", "modern", ["--fd={FD}", "--shared-dir", "{DIR}", "--cache", "always",
                               "--sandbox", "namespace", "--xattr", "--thread-pool-size=2",
                               "--rlimit-nofile=4096", "--log-level", "debug"],
         fd=7, guest=True),
    Line("libvirt", "session", ["--fd={FD}", "--shared-dir", "{DIR}", "--uid-map=:0:{UID}:1:",
                                "--uid-map=:1:{SUB}:65536:", "--gid-map=:0:{GID}:1:",
                                "--gid-map=:1:{SUB}:65536:"],
         fd=7, user=SESSION_USER),
    Line("libvirt", "legacy", ["--fd={FD}", "-o",
                               "source={DIR_ESC},cache=none,sandbox=chroot,xattr,no_flock,"
                               "no_posix_lock", "--thread-pool-size=1", "-d"],
         fd=7, guest=True),
    Line("kata-go", "qemu", ["--syslog", "--cache=auto", "--shared-dir={DIR}", "--fd={FD}",
                             "--thread-pool-size=1", "--announce-submounts", "--xattr"],
         fd=3, guest=True),
    Line("kata-go", "clh", ["--syslog", "--cache=auto", "--shared-dir={DIR}", "--fd={FD}",
                            "--thread-pool-size=1", "--announce-submounts"], fd=3),
    Line("kata-rs", "standalone", ["--socket-path", "{SOCK}", "--shared-dir", "{DIR}",
                                   "--cache", "auto", "--thread-pool-size=1", "-o",
                                   "announce_submounts", "--xattr"], guest=True),
    Line("kata-rs", "rootless", ["--socket-path", "{SOCKNAME}", "--shared-dir", "{DIR}",
                                 "--cache", "auto", "--thread-pool-size=1", "-o",
                                 "announce_submounts"], user="nobody", cwd=True),
    Line("kubevirt", "volume", KUBEVIRT, user=str(KUBEVIRT_UID)),
    Line("kubevirt", "service-account", KUBEVIRT + [KUBEVIRT_SA], user=str(KUBEVIRT_UID)),
    Line("kubevirt", "container-path", KUBEVIRT + [KUBEVIRT_SA], user=str(KUBEVIRT_UID)),
    Line("incus", "linux", ["--fd={FD}", "--cache=never", "--shared-dir={DIR}",
                            "--posix-acl=auto"], fd=3),
    Line("incus", "windows", ["--fd={FD}", "--cache=metadata", "--shared-dir={DIR}"], fd=3),
    Line("incus", "idmap", ["--fd={FD}", "--cache=always", "--shared-dir={DIR}",
                            "--translate-uid=map:0:1000000:65536",
                            "--translate-uid=forbid-guest:0:0",
                            "--translate-gid=map:0:1000000:65536",
                            "--translate-gid=forbid-guest:0:0",
                            "--translate-uid=forbid-guest:65536:4294901759",
                            "--translate-gid=forbid-guest:65536:4294901759"], fd=3),
    Line("lxd", "disk", ["--fd={FD}", "--shared-dir", "{DIR}", "--cache", "auto",
                         "--allow-direct-io", "--thread-pool-size", "0", "--xattr"], fd=3),
    Line("proxmox", "windows", ["--fd={FD}", "--shared-dir={DIR}", "--xattr", "--posix-acl",
                                "--announce-submounts", "--allow-direct-io", "--cache=auto",
                                "--inode-file-handles=prefer", "--syslog"], fd=9),
    Line("cloud-hypervisor", "docs", ["--log-level", "debug", "--socket-path={SOCK}",
                                      "--shared-dir={DIR}", "--cache=never",
                                      "--thread-pool-size=4"]),
    Line("cloud-hypervisor", "tests", ["--shared-dir", "{DIR}", "--socket-path", "{SOCK}",
                                       "--cache", "never", "--tag", "myfs"]),
]


class SystemLog:
    """A system log for --syslog lines: a datagram socket at /dev/log collecting what
    arrives. Where the host has one of its own, servers run in a mount namespace where this
    one is bound over it (`wrap`)."""

    def __init__(self, work: Path):
        self.path = work / "log.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.messages: list[str] = []
        self.own_dev_log = not os.path.exists("/dev/log")
        if self.own_dev_log:
            os.symlink(self.path, "/dev/log")
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        while True:
            try:
                self.messages.append(self.sock.recv(65536).decode(errors="replace"))
            except OSError:
                return

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run where /dev/log is this log."""
        if self.own_dev_log:
            return argv
        return ["unshare", "-m", "--propagation", "private", "sh", "-c",
                f'mount --bind {self.path} /dev/log && exec "$@"', "sh", *argv]

    def close(self) -> None:
        if self.own_dev_log and os.path.islink("/dev/log"):
            os.unlink("/dev/log")
        self.sock.close()


@dataclass
class Bed:
    """What every run shares: the binaries (copies a plain user can run) and the work dir."""
    work: Path
    memofs: Path
    virtiofsd: Path
    probe: Path
    log: SystemLog
    servers: list[subprocess.Popen] = field(default_factory=list)


def as_user(user: str | None) -> list[str]:
    if user is None:
        return []
    uid, gid = ids_of(user)
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]


def ids_of(user: str | None) -> tuple[int, int]:
    if user is None:
        return 0, 0
    if user.isdigit():
        return int(user), int(user)
    import pwd
    p = pwd.getpwnam(user)
    return p.pw_uid, p.pw_gid


def subordinate(user: str) -> int | None:
    try:
        for line in Path("/etc/subuid").read_text().splitlines():
            name, start, _ = line.split(":")
            if name == user:
                return int(start)
    except (OSError, ValueError):
        pass
    return None


@dataclass
class Started:
    proc: subprocess.Popen
    sock: Path
    stderr: Path
    listener: socket.socket | None
    # System log messages before it started (those after are its own).
    logged_before: int = 0
    # libvirt's pid file, locked by the server's process (see `start`).
    pidfile: Path | None = None


def start(bed: Bed, line: Line, share: Path, extra: list[str] | None = None) -> Started:
    """Runs `line` (and `extra`) as its manager does, over `share`, its socket in a
    directory of the user's own."""
    uid, gid = ids_of(line.user)
    sockets = bed.work / f"sockets-{line.name}"
    sockets.mkdir(exist_ok=True)
    shutil.chown(sockets, uid, gid)
    sock = sockets / "vhost.sock"
    sock.unlink(missing_ok=True)
    shutil.chown(share, uid, gid)
    fill = {"{DIR}": str(share), "{DIR_ESC}": str(share).replace(",", ",,"),
            "{SOCK}": str(sock), "{SOCKNAME}": sock.name, "{FD}": str(line.fd),
            "{UID}": str(uid), "{GID}": str(gid),
            "{SUB}": str(subordinate(line.user or "") or 0)}
    argv = []
    for a in line.argv + (extra or []):
        for k, v in fill.items():
            a = a.replace(k, v)
        argv.append(a)
    listener = None
    pass_fds: tuple[int, ...] = ()
    cmd = as_user(line.user) + [str(bed.virtiofsd)] + argv
    if line.syslog:
        cmd = bed.log.wrap(cmd)
    if line.fd is not None:
        # The listening socket, handed over as the manager's descriptor number.
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(sock))
        listener.listen(1)
        n = listener.fileno()
        pass_fds = (n,)
        cmd = ["bash", "-c", f'exec "$@" {line.fd}<&{n} {n}<&-', "bash", *cmd]
    stderr = bed.work / f"{line.name}.stderr"
    before = len(bed.log.messages)
    # libvirt's virExec: the child locks the pid file (fcntl) and keeps the descriptor open
    # across exec; libvirt later stops the server only while that lock is held.
    pidfile = bed.work / f"{line.name}.pid" if line.manager == "libvirt" else None
    if pidfile is not None:
        cmd = [sys.executable, "-c", LOCK_AND_EXEC, str(pidfile), *cmd]
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, pass_fds=pass_fds,
                                cwd=str(sockets) if line.cwd else None)
    bed.servers.append(proc)
    return Started(proc, sock, stderr, listener, before, pidfile)


# Locks the pid file argv[1] as libvirt's virExec does and runs the rest in its place.
LOCK_AND_EXEC = """import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.write(fd, str(os.getpid()).encode())
os.set_inheritable(fd, True)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def pidfile_locked(path: Path) -> bool:
    """Whether another process holds the lock on `path` (as libvirt asks)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def readiness(bed: Bed, line: Line, s: Started) -> str | None:
    """Waits for what tells the manager the server is up; None when it came, else why not."""
    def said() -> bool:
        text = s.stderr.read_text(errors="replace")
        if line.syslog:
            text = "\n".join(bed.log.messages[s.logged_before:])
        return READY in text or s.proc.poll() is not None
    if line.fd is None and not line.syslog and line.manager == "cloud-hypervisor":
        ok = until(lambda: s.sock.exists() or s.proc.poll() is not None, 20)
    else:
        ok = until(said, 20)
    if s.proc.poll() is not None:
        return f"exited {s.proc.returncode}: {s.stderr.read_text(errors='replace')[-400:]}"
    if ok is None:
        return f"not up within 20 s: {s.stderr.read_text(errors='replace')[-400:]}"
    return None


def probe(bed: Bed, s: Started, *args: str) -> dict[str, str]:
    r = subprocess.run([str(bed.probe), str(s.sock), *args], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    return dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l)


def ends(s: Started, limit: float = 15) -> str | None:
    """Waits for the server to end (its VMM gone); None if it ended with status 0."""
    try:
        code = s.proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        s.proc.kill()
        s.proc.wait()
        return f"still running {limit:.0f} s after the VMM left"
    if s.listener is not None:
        s.listener.close()
    return None if code == 0 else f"status {code}: {s.stderr.read_text(errors='replace')[-300:]}"


def stop(s: Started) -> None:
    if s.proc.poll() is None:
        s.proc.terminate()
        try:
            s.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait()
    if s.listener is not None:
        s.listener.close()


def new_share(bed: Bed, name: str) -> Path:
    share = bed.work / name
    share.mkdir(parents=True, exist_ok=True)
    (share / "hello").write_text("hello\n")
    os.chmod(share, 0o755)
    os.chmod(share / "hello", 0o644)
    return share


def comes_up(run: Run, bed: Bed, line: Line) -> None:
    """The line starts, serves a VMM and ends with it."""
    # A comma in the path: libvirt's older form doubles it.
    share = new_share(bed, f"share-{line.name}" + (",x" if "{DIR_ESC}" in str(line.argv) else ""))
    s = start(bed, line, share)
    why = readiness(bed, line, s)
    if why is not None:
        stop(s)
        run.check(f"{line.name}:comes-up", False, why)
        return
    if s.pidfile is not None:
        run.check(f"{line.name}:keeps-libvirts-pid-file-lock", pidfile_locked(s.pidfile))
    got = probe(bed, s, "--read", "hello")
    served = got.get("read") == "hello"
    run.check(f"{line.name}:comes-up", served, "" if served else str(got))
    why = ends(s)
    run.check(f"{line.name}:ends-with-its-vmm", why is None, why or "")
    stop(s)


def server_pids(root: int) -> list[int]:
    """`root` and its descendants (a sandboxed server serves from a child)."""
    out = [root]
    for task in Path(f"/proc/{root}/task").glob("*"):
        try:
            out += [p for c in (task / "children").read_text().split()
                    for p in server_pids(int(c))]
        except OSError:
            pass
    return out


def threads_named(root: int, prefix: str) -> int:
    n = 0
    for pid in server_pids(root):
        for comm in Path(f"/proc/{pid}/task").glob("*/comm"):
            try:
                n += comm.read_text().startswith(prefix)
            except OSError:
                pass
    return n


def thread_switches(root: int, prefix: str) -> int:
    """The voluntary context switches of the server's threads named `prefix`, summed."""
    n = 0
    for pid in server_pids(root):
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                if not (task / "comm").read_text().startswith(prefix):
                    continue
                for l in (task / "status").read_text().splitlines():
                    if l.startswith("voluntary_ctxt_switches:"):
                        n += int(l.split(":")[1])
            except OSError:
                pass
    return n


def fd_flags(root: int, name: str) -> list[int]:
    """The open flags of the server's descriptors of a file called `name`."""
    flags = []
    for pid in server_pids(root):
        for fd in Path(f"/proc/{pid}/fd").glob("*"):
            try:
                if os.readlink(fd).endswith("/" + name):
                    info = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
                    flags += [int(l.split()[1], 8) for l in info.splitlines()
                              if l.startswith("flags:")]
            except OSError:
                pass
    return flags


def status_field(root: int, key: str) -> str:
    """`key` of /proc/PID/status of the process that serves (the deepest of the tree)."""
    pid = server_pids(root)[-1]
    for l in Path(f"/proc/{pid}/status").read_text().splitlines():
        if l.startswith(key + ":"):
            return l.split(":", 1)[1].strip()
    return ""


def holding(bed: Bed, s: Started, *args: str):
    """A probe that stays connected (and holds its file open) until closed."""
    p = subprocess.Popen([str(bed.probe), str(s.sock), *args, "--hold"], text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout is not None
    lines = []
    for l in p.stdout:
        lines.append(l.strip())
        if l.strip() == "holding" or l.startswith("error="):
            break
    return p, lines


def option_checks(run: Run, bed: Bed) -> None:
    """Each option those lines pass, by what it does, against a run without it."""
    by = {l.name: l for l in LINES}
    mem = Line("memofs", "mem", ["--socket-path={SOCK}"])

    def with_server(line: Line, extra: list[str], body) -> None:
        s = start(bed, line, new_share(bed, f"opt-{line.name}"), extra)
        why = readiness(bed, line, s)
        if why is None:
            body(s)
        else:
            run.check(f"{line.name}{' '.join(extra)}:starts", False, why)
        stop(s)

    # --thread-pool-size: the workers exist while a VMM is served, none with 0, and they
    # serve the requests: a request sent after the last was answered finds them asleep and
    # wakes one (a voluntary context switch); unused, they would have slept a few times.
    for line, want in ((by["cloud-hypervisor-docs"], 4), (by["lxd-disk"], 0)):
        def pool(s: Started, line=line, want=want) -> None:
            p, _ = holding(bed, s, "--getattrs", "200", "--read", "hello")
            n = threads_named(s.proc.pid, "memofs-pool")
            woken = thread_switches(s.proc.pid, "memofs-pool")
            p.communicate("\n", timeout=30)
            run.check(f"thread-pool-{want}:workers", n == want, f"{n} pool threads")
            if want:
                run.check(f"thread-pool-{want}:requests-served-by-workers", woken >= 100,
                          f"the workers slept {woken} times for 200 requests")
        with_server(line, [], pool)
    # --tag: the configuration space names it; without, the device offers none.
    for line, want in ((by["cloud-hypervisor-tests"], "myfs"), (by["cloud-hypervisor-docs"], None)):
        def tag(s: Started, want=want) -> None:
            got = probe(bed, s, "--config")
            ok = (got.get("config_tag") == want and got.get("config_queues") == "1"
                  if want else got.get("config") == "none")
            run.check(f"tag-{want or 'none'}:config-space", ok, str(got))
        with_server(line, [], tag)
    # --allow-direct-io: the host file is open O_DIRECT; without it, not.
    for line, want in ((by["lxd-disk"], True), (by["incus-linux"], False)):
        def direct(s: Started, want=want) -> None:
            p, _ = holding(bed, s, "--read", "hello", "--flags", "direct")
            flags = fd_flags(s.proc.pid, "hello")
            p.communicate("\n", timeout=30)
            got = any(f & os.O_DIRECT for f in flags)
            run.check(f"allow-direct-io-{'on' if want else 'off'}:host-open",
                      bool(flags) and got == want, f"flags {[oct(f) for f in flags]}")
        with_server(line, [], direct)
    # --preserve-noatime: an O_NOATIME read leaves atime alone; without it the flag goes.
    for extra, moved in (([], "yes"), (["--preserve-noatime"], "no")):
        def noatime(s: Started, extra=extra, moved=moved) -> None:
            got = probe(bed, s, "--atime", "f", "--flags", "noatime")
            run.check(f"preserve-noatime-{'on' if extra else 'off'}:atime",
                      got.get("atime_moved") == moved, str(got))
        with_server(mem, ["-o", "strictatime", *extra], noatime)
    # --inode-file-handles: never keeps no CAP_DAC_READ_SEARCH (bit 2); prefer does.
    for mode, has in (("prefer", True), ("never", False)):
        def caps(s: Started, mode=mode, has=has) -> None:
            p, _ = holding(bed, s, "--read", "hello")
            eff = int(status_field(s.proc.pid, "CapEff") or "0", 16)
            p.communicate("\n", timeout=30)
            run.check(f"inode-file-handles-{mode}:cap-dac-read-search",
                      bool(eff & (1 << 2)) == has, f"CapEff {eff:#x}")
        with_server(by["cloud-hypervisor-tests"], [f"--inode-file-handles={mode}"], caps)
    refused = subprocess.run([str(bed.virtiofsd), "--socket-path", str(bed.work / "m.sock"),
                              "--shared-dir", "/proc/self", "--sandbox=none",
                              "--inode-file-handles=mandatory"],
                             capture_output=True, text=True, timeout=30)
    run.check("inode-file-handles-mandatory:refused-without-handles",
              refused.returncode != 0 and "mandatory" in refused.stderr,
              " ".join(refused.stderr.split())[-200:])
    # --writeback and --security-label=: what INIT grants a kernel that offers them.
    for extra, offer, key, want in ((["--writeback"], "writeback", "writeback", "yes"),
                                    ([], "writeback", "writeback", "no"),
                                    (["--security-label=auto"], "writeback", "root", "ok"),
                                    (["--security-label"], "writeback", "root", None)):
        def init(s: Started, extra=extra, offer=offer, key=key, want=want) -> None:
            got = probe(bed, s, "--offer", offer)
            ok = got.get(key) == want if want else "error" in got
            run.check(f"init{''.join(extra) or '-default'}:{key}", ok, str(got))
        with_server(mem, extra, init)
    # --uid-map: the plain user's sandbox maps what libvirt's session mode asks for.
    session = by["libvirt-session"]
    if subordinate(SESSION_USER) is None:
        run.cannot(f"the user {SESSION_USER} has no subordinate ids (scripts/setup.sh adds them)")
    else:
        def uid_map(s: Started) -> None:
            p, _ = holding(bed, s, "--read", "hello")
            m = Path(f"/proc/{server_pids(s.proc.pid)[-1]}/uid_map").read_text().split()
            p.communicate("\n", timeout=30)
            want = ["0", str(ids_of(SESSION_USER)[0]), "1", "1",
                    str(subordinate(SESSION_USER)), "65536"]
            run.check("uid-map:namespace", m == want, " ".join(m))
        with_server(session, [], uid_map)
    # --syslog: the readiness line arrives there, and nowhere to log is refused.
    said = [m for m in bed.log.messages if READY in m]
    run.check("syslog:readiness-line-logged", any("memofs-virtiofsd[" in m for m in said),
              said[0][:120] if said else f"{len(bed.log.messages)} messages")


GUEST_SCRIPT = """
check() { n=$1; shift; if out=$("$@" 2>&1); then echo "PASS $n"; else echo "FAIL $n: $out"; fi; }
same() { if [ "$2" = "$3" ]; then echo "PASS $1"; else echo "FAIL $1: got '$2', want '$3'"; fi; }
check mount mount -t virtiofs fs /mnt
same host-file "$(cat /mnt/hello)" hello
mkdir -p /mnt/checks
. /bin/fs-checks /mnt/checks
rmdir /mnt/checks
umount /mnt
"""


def guest_checks(run: Run, bed: Bed, kid: str, k) -> None:
    """A guest on each line marked for it mounts the tag and passes the device checks."""
    initrd = initramfs(bed.work / "initrd.cpio",
                       {"/bin/fs-checks": TOP / "scripts" / "vm" / "fs-checks.sh"}, k)
    for line in (l for l in LINES if l.guest):
        s = start(bed, line, new_share(bed, f"guest-{line.name}"))
        why = readiness(bed, line, s)
        if why is not None:
            run.check(f"{line.name}:guest", False, why)
            stop(s)
            continue
        gdir = bed.work / f"vm-{line.name}"
        gdir.mkdir()
        try:
            g = Guest(gdir, k.image, initrd, s.sock, memory_mib=512)
            try:
                _, out, _ = g.run(GUEST_SCRIPT, timeout=600)
            finally:
                g.stop()
            results = [l for l in out.splitlines() if l.startswith(("PASS ", "FAIL "))]
            failed = [l for l in results if l.startswith("FAIL")]
            run.check(f"{line.name}:guest-checks", bool(results) and not failed,
                      f"{len(results)} checks" if not failed else "; ".join(failed)[:400])
        except BenchError as e:
            run.check(f"{line.name}:guest-checks", False, str(e)[:400])
        why = ends(s, 30)
        run.check(f"{line.name}:ends-with-its-guest", why is None, why or "")
        stop(s)


def one(kid: str, memofs: str) -> Run:
    run, k = guestcheck.begin("vm-managers", kid)
    if os.geteuid() != 0:
        run.cannot("the managers' lines run as root and as other users: run as root")
        return run
    with tempfile.TemporaryDirectory(prefix="memofs-managers-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        bins = work / "bin"
        bins.mkdir()
        for b in ("memofs", "memofs-vhost-probe"):
            shutil.copy(Path(memofs).parent / b, bins / b)
        # The name the package installs it under (a link to memofs), which managers run.
        (bins / "memofs-virtiofsd").symlink_to("memofs")
        bed = Bed(work, bins / "memofs", bins / "memofs-virtiofsd", bins / "memofs-vhost-probe",
                  SystemLog(work))
        try:
            for line in LINES:
                comes_up(run, bed, line)
            option_checks(run, bed)
            if k is not None:
                guest_checks(run, bed, kid, k)
            bed.log.close()
            no_log = subprocess.run(bed.log.wrap([str(bed.virtiofsd), "--socket-path",
                                                  str(work / "n.sock"), "--syslog"]),
                                    capture_output=True, text=True, timeout=30)
            run.check("syslog:refused-without-a-system-log",
                      no_log.returncode == 1 and "no system log" in no_log.stderr,
                      " ".join(no_log.stderr.split())[-200:])
        finally:
            bed.log.close()
            for p in bed.servers:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return run


if __name__ == "__main__":
    top = Path(__file__).resolve().parents[2]
    cargo = os.environ.get("CARGO", "cargo")
    subprocess.run([cargo, "build", "-q", "-p", "memofs", "-p", "memofs-vhost-attack"],
                   cwd=top, check=True)
    sys.exit(guestcheck.main("managers.py", one))
