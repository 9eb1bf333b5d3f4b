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
- `changes` (needs machine B): NAMES times, a name is looked up on A (the kernel may cache the
  miss), created on B, and stat()ed on A until it appears; then deleted on B until it is gone
  on A. Latency from B's syscall's return; a change not seen within TIMEOUT counts as stale.
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
import tarfile
import time
from pathlib import Path

from .. import tools
from . import Context, Metric, Param, Part, Workload
from .coherence import create_delete
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


def changes(ctx: Context):
    yield from create_delete(ctx, str(ctx.peer), str(ctx.mnt), "from-b")


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
        Param("names", "30", "3", "create+delete pairs made on machine B"),
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
        Part("changes", ("latency", "stale"), changes, (), lambda p: ["create", "delete"],
             needs_peer=True),
    ],
)
