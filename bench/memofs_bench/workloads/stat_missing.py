"""stat-missing (seed 001, negative dentry caching): stat() of a path that does not exist.

- shell-loop: the seed's command, `for i in $(seq 1 N); do stat non-existent.txt 2>/dev/null;
  done` with the target as cwd, after `echo 3 > /proc/sys/vm/drop_caches`; seconds. It mostly
  measures fork/exec (~1.3 ms an iteration here), so judge by the in-process loop.
- inproc: N stat() calls of the same missing name from one C process (the interpreter is not
  measured), after dropping caches; stats per second.
"""

from __future__ import annotations

import shutil

from .. import tools
from . import Context, Metric, Param, Part, Workload

NAME = "non-existent.txt"


def shell_loop(ctx: Context):
    n = ctx.int("loops")
    shell = shutil.which("bash") or "sh"
    ctx.status(f"shell loop of {n} stat processes")
    ctx.drop_caches()
    secs, _ = ctx.timed([shell, "-c", f"for i in $(seq 1 {n}); do stat {NAME} 2>/dev/null; done"],
                        check=False)   # the loop's status is the last stat's: 1
    yield "shell-loop", str(n), secs


def inproc(ctx: Context):
    exe = str(tools.helper("stat_loop"))
    for n in ctx.ints("counts"):
        ctx.status(f"in-process stat x{n}")
        ctx.drop_caches()
        out = ctx.run([exe, str(ctx.mnt), NAME, str(n)]).stdout.split()
        ns, count, misses = int(out[0]), int(out[1]), int(out[2])
        if misses != count:
            raise tools.BenchError(f"{NAME} exists on the target ({count - misses} hits)")
        yield "inproc", str(n), count / (ns / 1e9)


WORKLOAD = Workload(
    name="stat-missing",
    summary="stat() of a missing path: the seed's shell loop and an in-process loop",
    seed="001 (fuse: negative_dentry_timeout)",
    params=[
        Param("loops", "10000", "100", "iterations of the shell loop (one stat process each)"),
        Param("counts", "10000,1000000", "1000,10000", "stat() calls per in-process run"),
    ],
    metrics=[
        Metric("shell-loop", "shell loop of stat processes (elapsed)", "s", False, "iterations"),
        Metric("inproc", "stat() of a missing path, in-process", "stats/s", True, "calls"),
    ],
    parts=[
        Part("shell-loop", ("shell-loop",), shell_loop, ("stat", "seq"),
             lambda p: [p["loops"]]),
        Part("inproc", ("inproc",), inproc, (), lambda p: [str(int(x)) for x in
                                                           p["counts"].split(",") if x.strip()]),
    ],
)
