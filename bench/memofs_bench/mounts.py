"""Mount-table polling, unmounting that always happens, and signal handling."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator

POLL = 0.01


def _unescape(s: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and len(s[i + 1:i + 4]) == 3 and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def mounts() -> list[dict]:
    """The mount table: [{'mountpoint', 'fstype', 'source', 'options'}]."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            lf, rf = left.split(), right.split()
            out.append({"mountpoint": _unescape(lf[4]), "options": lf[5],
                        "fstype": rf[0] if rf else "", "source": _unescape(rf[1]) if len(rf) > 1 else "",
                        "super_options": rf[2] if len(rf) > 2 else ""})
    return out


def mount_entry(path: Path | str) -> dict | None:
    p = os.path.realpath(path)
    found = None
    for m in mounts():
        if m["mountpoint"] == p:
            found = m          # the last one is the one on top
    return found


def wait_for(cond: Callable[[], bool], timeout: float, abort: Callable[[], str | None] = lambda: None,
             what: str = "condition") -> None:
    """Poll `cond` until true; `abort` may return a message to give up early (e.g. the server
    exited). Raises TimeoutError / RuntimeError."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return
        msg = abort()
        if msg:
            raise RuntimeError(msg)
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(POLL)


def wait_mounted(path: Path, timeout: float = 20.0, fstype_prefix: str = "",
                 abort: Callable[[], str | None] = lambda: None) -> dict:
    def ok() -> bool:
        m = mount_entry(path)
        return bool(m and m["fstype"].startswith(fstype_prefix))
    wait_for(ok, timeout, abort, f"{path} to be mounted")
    return mount_entry(path)  # type: ignore[return-value]


def unmount(path: Path, commands: list[list[str]], timeout: float = 10.0) -> list[str]:
    """Unmount `path` trying each command in turn (then a lazy umount as the last resort),
    retrying busy mounts until `timeout`. Returns notes on anything unusual."""
    notes: list[str] = []
    if mount_entry(path) is None:
        return notes
    deadline = time.monotonic() + timeout
    last = ""
    attempts = [*commands, ["umount", str(path)]]
    while True:
        for cmd in attempts:
            r = subprocess.run(cmd, capture_output=True, text=True)
            if mount_entry(path) is None:
                return notes
            if r.returncode != 0:
                last = (r.stderr or r.stdout).strip()
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    notes.append(f"{path} stayed busy ({last}); detached it with umount -l")
    subprocess.run(["umount", "-l", str(path)], capture_output=True)
    return notes


# --- signals and emergency cleanup -------------------------------------------------------------

_cleanups: dict[int, Callable[[], None]] = {}


def register_cleanup(key: int, fn: Callable[[], None]) -> None:
    _cleanups[key] = fn


def unregister_cleanup(key: int) -> None:
    _cleanups.pop(key, None)


@atexit.register
def _run_cleanups() -> None:
    for key in list(_cleanups)[::-1]:
        fn = _cleanups.pop(key, None)
        if fn:
            with contextlib.suppress(Exception):
                fn()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP behave like Ctrl-C, so every try/finally unmounts."""
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _raise_interrupt)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP while cleaning up so a second Ctrl-C cannot cut an unmount
    short; they are delivered when the block ends."""
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def set_affinity_all_threads(pid: int, cpus: set[int]) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), cpus)


def affinity(pid: int) -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:
        return None


def tree_cpu_seconds(pids: list[int]) -> float | None:
    """User plus system CPU seconds used so far by processes `pids` and every process below
    them (a sandboxed server runs in a child), counting children they have reaped; None
    without a live one."""
    stats: dict[int, list[str]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stats[int(d)] = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                pass
    children: dict[int, list[int]] = {}
    for pid, f in stats.items():
        children.setdefault(int(f[1]), []).append(pid)
    todo = [p for p in pids if p in stats]
    if not todo:
        return None
    ticks, seen = 0, set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        f = stats[pid]   # after the command: state, ppid, ...; utime..cstime are 11-14
        ticks += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
        todo += children.get(pid, [])
    return ticks / os.sysconf("SC_CLK_TCK")


def pids_with_arg(arg: str, exe_name: str | None = None) -> list[int]:
    """Processes whose argv contains `arg` (and whose argv[0] ends with exe_name)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if arg in args and (exe_name is None or (args and os.path.basename(args[0]) == exe_name)):
            out.append(int(d))
    return out
