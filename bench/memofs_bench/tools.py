"""External tools: finding them, compiling the C helpers on demand, running commands."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Sequence

CSRC = Path(__file__).resolve().parent / "csrc"
REPO = Path(__file__).resolve().parents[2]   # bench/memofs_bench/tools.py -> the repo root


class BenchError(Exception):
    """A problem to report for one target or part, after which the run carries on."""


class ToolMissing(BenchError):
    pass


class CheckFailed(BenchError):
    """A workload's result is wrong (a file's content, a count, a build that does not run):
    the filesystem gave a wrong answer. Recorded like any failure, and it makes the run's
    exit status 1."""


def cache_dir() -> Path:
    d = os.environ.get("MEMOFS_BENCH_CACHE")
    if d:
        p = Path(d)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        p = Path(base) / "memofs-bench"
    p.mkdir(parents=True, exist_ok=True)
    return p


def require(tool: str, hint: str = "") -> str:
    path = shutil.which(tool)
    if not path:
        raise ToolMissing(f"`{tool}` is not installed{': ' + hint if hint else ''}")
    return path


def compile_c(name: str, sources: Sequence[Path], cflags: Sequence[str] = (),
              libs: Sequence[str] = ()) -> Path:
    """Compile `sources` with cc into the cache, keyed by a hash of sources and flags, so a
    changed helper is rebuilt and an unchanged one is reused."""
    cc = require("cc", "apt-get install gcc")
    h = hashlib.sha256()
    for s in sources:
        h.update(Path(s).read_bytes())
    h.update(repr((list(cflags), list(libs))).encode())
    out = cache_dir() / "bin" / f"{name}-{h.hexdigest()[:12]}" / name
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    cmd = [cc, "-O2", "-Wall", *cflags, *map(str, sources), "-o", str(tmp), *libs]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"compiling {name} failed: {shlex.join(cmd)}\n{r.stderr.strip()}")
    os.replace(tmp, out)
    return out


def helper(name: str) -> Path:
    """One of the C helpers in csrc/, e.g. helper('stat_loop')."""
    return compile_c(name, [CSRC / f"{name}.c"])


def helper_threads(name: str) -> Path:
    """A C helper that uses POSIX threads."""
    return compile_c(name, [CSRC / f"{name}.c"], cflags=["-pthread"])


def run(cmd: Sequence[str], timeout: float | None = None, check: bool = True,
        env_update: dict[str, str | None] | None = None, **kw) -> subprocess.CompletedProcess:
    """Run with LC_ALL=C; `env_update` sets variables (None removes one)."""
    env = dict(os.environ, LC_ALL="C")
    for k, v in (env_update or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=env, **kw)
    if check and r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        said = " ... ".join(dict.fromkeys([msg[0], msg[-1]])) if msg else ""
        raise BenchError(f"`{shlex.join(map(str, cmd))}` exited {r.returncode}"
                         + (f": {said}" if said else ""))
    return r


def until(cond, limit: float) -> float | None:
    """Seconds until `cond()` held, or None if it did not within `limit`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def drop_caches() -> bool:
    """sync; echo 3 > /proc/sys/vm/drop_caches. False when not permitted (not root)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def parse_size(s: str) -> int:
    """'64M' -> 67108864; accepts k/K, m/M, g/G suffixes (powers of 1024) or plain bytes."""
    s = str(s).strip()
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(s[-1:].lower())
    if mult:
        return int(float(s[:-1]) * mult)
    return int(s)


def format_size(n: int) -> str:
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("k", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return str(n)
