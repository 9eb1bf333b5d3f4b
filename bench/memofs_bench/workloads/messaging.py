"""messaging (seed 000, S_NOATIME for pseudo inodes): hackbench-style message passing.

- perf-pipe: `perf bench sched messaging --pipe` for each group count, run with the target as
  cwd (pipes do not live on it; a control run); "Total time" in seconds.
- fifo: the same pattern over named FIFOs created on the target (C helper): per group 20
  senders and 20 receivers, every sender writes LOOPS messages of 100 bytes to every receiver;
  seconds from the start signal until all processes exit, FIFO opens included.
"""

from __future__ import annotations

import re

from .. import tools
from . import Context, Metric, Param, Part, Workload, split_list

TOTAL = re.compile(r"Total time:\s*([0-9.]+)")


def perf_pipe(ctx: Context):
    threads = ctx.params["threads"].lower() in ("1", "yes", "true", "on")
    for g in ctx.ints("groups"):
        ctx.status(f"perf messaging --pipe, {g} groups")
        cmd = ["perf", "bench", "sched", "messaging", "--pipe", "--group", str(g),
               "--nr_loops", str(ctx.int("loops"))] + (["--thread"] if threads else [])
        r = ctx.run(cmd, timeout=600)
        m = TOTAL.search(r.stdout)
        if not m:
            raise tools.BenchError(f"no 'Total time' in perf's output: {r.stdout.strip()[-200:]}")
        yield "perf-pipe", str(g), float(m.group(1))


def fifo(ctx: Context):
    exe = str(tools.helper("fifo_messaging"))
    d = ctx.mnt / "messaging-fifos"
    d.mkdir(exist_ok=True)
    for g in ctx.ints("groups"):
        ctx.status(f"FIFO messaging, {g} groups")
        r = ctx.run([exe, str(d), str(g), str(ctx.int("loops"))], timeout=600)
        yield "fifo", str(g), float(r.stdout.split()[0])
    d.rmdir()


def labels(p):
    return split_list(p["groups"])


WORKLOAD = Workload(
    name="messaging",
    summary="perf bench sched messaging --pipe, and the same pattern over FIFOs on the target",
    seed="000 (fs: S_NOATIME for pseudo inodes)",
    params=[
        Param("groups", "1,3,5,7,12,18,24,30,32", "1,2", "group counts (20+20 tasks a group)"),
        Param("loops", "100", "10", "messages from each sender to each receiver"),
        Param("threads", "1", "1", "perf: threads (1, as in the seed) or processes (0)"),
    ],
    metrics=[
        Metric("perf-pipe", "perf bench sched messaging --pipe", "s", False, "groups"),
        Metric("fifo", "messaging over FIFOs on the target", "s", False, "groups"),
    ],
    parts=[
        Part("perf-pipe", ("perf-pipe",), perf_pipe, ("perf",), labels),
        Part("fifo", ("fifo",), fifo, (), labels),
    ],
)
