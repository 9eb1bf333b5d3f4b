"""dfs: a distributed filesystem's mount on machine A against memofs in front of it.

For the targets on a distributed filesystem (`seaweedfs`, `memofs-sw`, `juicefs`,
`memofs-jfs`: a fresh bed per mount, machines A and B; see `dfs_targets`). Parts, each on
machine A's view:
- `lookups`: COUNT stat() calls of a missing name from one C process (what Python's import
  path scan, make's and compilers' include searches and `git status` do), stats/s;
- `imports`: a fresh `python -S -E` imports 40 standard-library modules from a copy of the
  standard library on the target, behind PATHS empty directories ahead of it on `sys.path`
  (each import looks in every one first): once after drop_caches, then WARM times, each
  GAP seconds after the last (as scripts and test runs start now and then, later than the
  engine's mount keeps what it cached); every module checked to come from the target; s;
- `tree`: untar of a synthetic source tree of FILES files (the writes: each byte crosses
  memofs and the engine's mount, two FUSE hops), `git add` + `git commit` of it, `git status`
  the first time after the commit (it re-reads racily clean files), again, and after
  drop_caches, `grep -r` warm; s;
  before the timed warm steps every target is left SETTLE seconds (untimed) and, where it
  reports its invalidations, until they stop, so that a warm step finds a settled cache;
- `changes` (needs machine B): NAMES names, BATCH at a time, each looked up on A (the kernel
  may cache the miss), then on B created, rewritten (longer data), renamed and deleted, one
  kind for the whole batch at a time, while a thread polls A until every name of the batch
  shows it. Latency per name from its syscall's return on B (`compare --stats
  Median,P99,Max` gives median, p99 and max); a change not seen within TIMEOUT counts as stale.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tarfile
import threading
import time
from pathlib import Path

from .. import tools
from . import Context, Metric, Param, Part, Workload
from .tree import MARKER, tarball

NAME = "no-such-module.py"
MODULES = ("json email.parser email.message http.client xml.etree.ElementTree asyncio decimal "
           "unittest logging.handlers argparse csv urllib.request dataclasses typing tomllib "
           "pathlib textwrap difflib pprint statistics fractions uuid zipfile tarfile shutil "
           "subprocess tempfile glob string calendar gettext configparser html.parser base64 "
           "hashlib ipaddress selectors queue inspect traceback").split()
SKIP = {"test", "tests", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip",
        "site-packages", "dist-packages", "__pycache__", "lib-dynload", "pydoc_data"}


def lookups(ctx: Context):
    exe = str(tools.helper("stat_loop"))
    n = ctx.int("count")
    ctx.status(f"{n} stat() of a missing name")
    out = ctx.run([exe, str(ctx.mnt), NAME, str(n)]).stdout.split()
    ns, count, misses = int(out[0]), int(out[1]), int(out[2])
    if misses != count:
        raise tools.CheckFailed(f"{NAME} exists on the target")
    yield "lookups", "missing", count / (ns / 1e9)


def stdlib_tarball() -> Path:
    """The interpreter's standard library (pure Python, no tests), packed once."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    out = tools.cache_dir() / f"stdlib-{version}.tar"
    if out.exists():
        return out
    src = Path(sysconfig.get_paths()["stdlib"])
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        tar.add(src, arcname="stdlib",
                filter=lambda i: None if set(Path(i.name).parts) & SKIP else i)
    tmp.rename(out)
    return out


def _import_cmd(ctx: Context) -> list[str]:
    paths = [str(ctx.mnt / f"path{i:02}") for i in range(ctx.int("paths"))]
    lib = str(ctx.mnt / "stdlib")
    code = (f"import sys; sys.path[:0] = {paths + [lib]!r}\n"
            f"for m in {MODULES!r}: __import__(m)\n"
            f"bad = [m for m in {MODULES!r} if not sys.modules[m].__file__.startswith({lib!r})]\n"
            "sys.exit(f'not from the target: {bad}' if bad else 0)\n")
    return [sys.executable, "-S", "-E", "-c", code]


def settle(ctx: Context) -> None:
    """Waits (untimed) until what was just written has settled: the engine's mount has caught
    up (its timeouts are 1 s) and a change feed has delivered its last invalidation (memofs's
    counters stay still for a second), so that a warm step measures a warm cache."""
    time.sleep(float(ctx.params["settle"]))
    def sent() -> int | None:
        ev = (ctx.stats() or {}).get("events")
        return None if ev is None else ev.get("inval_entry", 0) + ev.get("inval_inode", 0)
    last, deadline = sent(), time.monotonic() + 30
    while last is not None and time.monotonic() < deadline:
        time.sleep(1)
        now = sent()
        if now == last:
            break
        last = now


def imports(ctx: Context):
    ctx.status("the standard library onto the target (untimed)")
    ctx.run(["tar", "-xf", str(stdlib_tarball())])
    for i in range(ctx.int("paths")):
        (ctx.mnt / f"path{i:02}").mkdir()
    cmd = _import_cmd(ctx)
    ctx.run(cmd)        # the first run writes __pycache__ (untimed)
    settle(ctx)
    ctx.drop_caches()
    ctx.status("imports after drop_caches")
    secs, _ = ctx.timed(cmd)
    yield "imports", "cold", secs
    for i in range(ctx.int("warm")):
        # As imports run in practice (test runs, scripts started now and then): later than
        # the engine's own mount keeps what it cached.
        time.sleep(float(ctx.params["gap"]))
        ctx.status(f"imports, warm {i + 1}")
        secs, _ = ctx.timed(cmd)
        yield "imports", "warm", secs
    shutil.rmtree(ctx.mnt / "stdlib")


def tree(ctx: Context):
    files = ctx.int("files")
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost",
           "-c", "gc.auto=0"]
    ctx.status(f"untar {files} files")
    secs, _ = ctx.timed(["tar", "-xf", str(tarball(files))])
    yield "time", "untar", secs
    settle(ctx)
    ctx.status("git add + commit")
    ctx.run(git + ["init", "-q"])
    secs, _ = ctx.timed(["sh", "-c", f"{' '.join(git)} add -A && "
                                     f"{' '.join(git)} commit -q -m tree"])
    yield "time", "git-commit", secs
    settle(ctx)
    # The first status after the commit re-reads racily clean files and rewrites the index;
    # the second is the everyday one; the cold one follows drop_caches.
    steps = (("git-status-first", False), ("git-status", False), ("git-status-cold", True))
    for label, drop in steps:
        ctx.drop_caches() if drop else None
        ctx.status(label)
        secs, r = ctx.timed(git + ["status", "--porcelain"])
        if r.stdout.strip():
            raise tools.CheckFailed(f"git status is not clean: {r.stdout[:200]}")
        yield "time", label, secs
    ctx.status("grep -r")
    secs, r = ctx.timed(["grep", "-r", "-l", MARKER, "src"])
    if len(r.stdout.splitlines()) != len(range(0, files, 7)):
        raise tools.CheckFailed(f"grep found {len(r.stdout.splitlines())} files")
    yield "time", "grep", secs


KINDS = ("create", "rewrite", "rename", "delete")


def _on_b(kind: str, b: Path, name: str) -> None:
    """Makes change `kind` of `name` on machine B (`b`)."""
    if kind == "create":
        (b / name).write_bytes(b"made on B")
    elif kind == "rewrite":
        (b / name).write_bytes(b"rewritten on B, longer")
    elif kind == "rename":
        (b / name).rename(b / f"{name}-moved")
    else:
        (b / f"{name}-moved").unlink()


def _shows(kind: str, a: Path, name: str) -> bool:
    """Whether machine A's view `a` (through the target) shows change `kind` of `name`."""
    def read(p: Path) -> bytes | None:
        try:
            return p.read_bytes()
        except OSError:
            return None
    if kind == "create":
        return read(a / name) == b"made on B"
    if kind == "rewrite":
        return read(a / name) == b"rewritten on B, longer"
    if kind == "rename":
        return not os.path.lexists(a / name) and os.path.lexists(a / f"{name}-moved")
    return not os.path.lexists(a / f"{name}-moved")


def _watch(kind: str, a: Path, pending: dict, done: threading.Event, timeout: float,
           out: list) -> None:
    """Polls A (`a`) for change `kind` of each name in `pending` (name: when B made it)
    until `done` is set and nothing is pending; appends (name, seconds or None if not seen
    within `timeout`) to `out`."""
    while not (done.is_set() and not pending):
        for name, made in list(pending.items()):
            now = time.perf_counter()
            if _shows(kind, a, name):
                out.append((name, time.perf_counter() - made))
            elif now - made > timeout:
                out.append((name, None))
            else:
                continue
            del pending[name]
        time.sleep(1e-4)


def changes(ctx: Context):
    n, batch, timeout = ctx.int("names"), ctx.int("batch"), float(ctx.params["timeout"])
    a, b = ctx.mnt, Path(ctx.peer)
    stale = dict.fromkeys(KINDS, 0)
    for first in range(0, n, batch):
        names = [f"from-b-{os.getpid()}-{i}" for i in range(first, min(n, first + batch))]
        ctx.status(f"changes on B, names {first + 1}-{first + len(names)} of {n}")
        for name in names:
            if os.path.lexists(a / name):
                raise tools.CheckFailed(f"{name} exists before the test")
        for kind in KINDS:
            # A watcher polls A from the first change on, while the others are made.
            pending, done, seen = {}, threading.Event(), []
            watcher = threading.Thread(target=_watch,
                                       args=(kind, a, pending, done, timeout, seen))
            watcher.start()
            for name in names:
                _on_b(kind, b, name)
                pending[name] = time.perf_counter()
            done.set()
            watcher.join()
            for _, secs in seen:
                if secs is None:
                    stale[kind] += 1
                else:
                    yield "latency", kind, secs * 1e3
    for kind in KINDS:
        yield "stale", kind, 100.0 * stale[kind] / n


WORKLOAD = Workload(
    name="dfs",
    summary="a distributed filesystem's mount against memofs over it: missing-name lookups, "
            "Python imports, a git tree, changes made on another machine",
    seed="001 (negative dentries, across machines)",
    params=[
        Param("count", "10000", "500", "stat() calls of a missing name"),
        Param("paths", "40", "3", "empty directories ahead of the library on sys.path"),
        Param("warm", "5", "1", "warm import runs"),
        Param("gap", "2", "0", "seconds (untimed) before each warm import run: longer than "
              "the engine's mount keeps names and attributes (SeaweedFS: 1 s)"),
        Param("files", "5000", "50", "files in the synthetic tree"),
        Param("names", "100", "4", "names created, rewritten, renamed and deleted on machine B"),
        Param("batch", "50", "2", "names changed at a time (each kind at once for a batch)"),
        Param("timeout", "5", "5", "seconds after which a change on B counts as stale"),
        Param("settle", "3", "0", "seconds every target is left, untimed, after writes and "
              "before warm steps"),
    ],
    metrics=[
        Metric("lookups", "stat() of a missing name, in-process", "stats/s", True, "name",
               summary=True),
        Metric("imports", "python imports 40 modules behind a long sys.path", "s", False,
               "cache", summary=True),
        Metric("time", "step time", "s", False, "step", summary=True),
        Metric("latency", "a change on machine B visible on A", "ms", False, "change",
               summary=True),
        Metric("stale", "changes on B still invisible after the timeout", "%", False, "change"),
    ],
    parts=[
        Part("lookups", ("lookups",), lookups, (), lambda p: ["missing"]),
        Part("imports", ("imports",), imports, ("tar",), lambda p: ["cold", "warm"]),
        Part("tree", ("time",), tree, ("tar", "git", "grep"),
             lambda p: ["untar", "git-commit", "git-status-first", "git-status", "git-status-cold",
                        "grep"]),
        Part("changes", ("latency", "stale"), changes, (), lambda p: list(KINDS),
             needs_peer=True),
    ],
)
