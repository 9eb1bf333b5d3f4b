"""Workloads: each module defines WORKLOAD, a Workload with its parameters, the metrics it
reports (unit, and whether higher or lower is better) and the parts that produce them.

A part is a generator `run(ctx)` yielding `(metric, param label, value)` or
`(metric, param label, value, detail)` (detail: a JSON-able dict kept with the sample); it runs
on a freshly mounted target with ctx.mnt as its directory. Parameters are strings (lists are
comma separated) with a normal default and a tiny `quick` value for smoke runs. A workload's
`prepare(params)`, if any, runs once before the rounds (downloads, tarballs), untimed.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from .. import tools

if TYPE_CHECKING:
    from ..targets import Target
    from ..vm import Guest, GuestSetup

Sample = tuple  # (metric name, param label, value)


@dataclass
class Param:
    name: str
    default: str
    quick: str
    help: str


@dataclass
class Metric:
    name: str                 # short name inside the workload, e.g. "inproc"
    title: str
    unit: str
    higher_better: bool
    param_name: str = ""      # what the per-row parameter is, e.g. "groups"
    row_label: str | None = None   # mmtests label for the central rows (e.g. "Procs")
    summary: bool = False     # also report medians and ratios to the baseline per row
    server_cost: bool = False  # what the FUSE server spends: 0 where there is none (tmpfs)


@dataclass
class Part:
    name: str
    metrics: tuple[str, ...]
    run: Callable[["Context"], Iterator[Sample]]
    requires: tuple[str, ...] = ()      # commands that must be on PATH
    labels: Callable[[dict], list[str]] = lambda p: []   # expected row order
    needs_source: bool = False          # only for targets exporting a host directory
    needs_peer: bool = False            # only for targets with another machine's view
    optional: bool = False              # a missing tool is noted, not a failed run


@dataclass
class Workload:
    name: str
    summary: str
    seed: str
    params: list[Param]
    metrics: list[Metric]
    parts: list[Part]
    prepare: Callable[[dict], None] | None = None
    # For a workload that runs in a guest (only on the vm-* targets): its kernel and files.
    guest: Callable[[dict], "GuestSetup"] | None = None
    moves: bool = False     # it moves its targets' devices between VMs (only the mig-* targets)

    def param_values(self, overrides: dict[str, str], quick: bool) -> dict[str, str]:
        vals = {p.name: (p.quick if quick else p.default) for p in self.params}
        vals.update({k: v for k, v in overrides.items() if k in vals})
        return vals

    def metric(self, name: str) -> Metric:
        return next(m for m in self.metrics if m.name == name)

    def key(self, metric: str) -> str:
        return f"{self.name}/{metric}"

    def metric_docs(self, params: dict[str, str]) -> dict[str, dict]:
        out = {}
        for m in self.metrics:
            order: list[str] = []
            for part in self.parts:
                if m.name in part.metrics:
                    order += [x for x in part.labels(params) if x not in order]
            out[self.key(m.name)] = {"workload": self.name, "metric": m.name, "title": m.title,
                                     "unit": m.unit, "higher_better": m.higher_better,
                                     "param_name": m.param_name, "row_label": m.row_label,
                                     "summary": m.summary, "params": order}
        return out


@dataclass
class Context:
    mnt: Path
    params: dict[str, str]
    source: Path | None = None          # the host directory behind the mount, if any
    peer: Path | None = None            # another machine's view of the same files, if any
    status: Callable[[str], None] = lambda s: None
    notes: list[str] = field(default_factory=list)
    stats: Callable[[], dict | None] = lambda: None   # the server's own counters, if it has any
    guest: "Guest | None" = None        # the guest the filesystem is mounted in, if any
    server_cpu: Callable[[], float | None] = lambda: None   # its server's CPU seconds so far
    target: "Target | None" = None      # the target itself (the migrate family serves it)

    def ints(self, name: str) -> list[int]:
        return [int(x) for x in split_list(self.params[name])]

    def sizes(self, name: str) -> list[int]:
        return [tools.parse_size(x) for x in split_list(self.params[name])]

    def list(self, name: str) -> list[str]:
        return split_list(self.params[name])

    def int(self, name: str) -> int:
        return int(self.params[name])

    def drop_caches(self) -> None:
        if not tools.drop_caches() and "drop_caches" not in self.notes:
            self.notes.append("drop_caches")   # reported once by the runner

    def run(self, cmd: list[str], **kw) -> subprocess.CompletedProcess:
        kw.setdefault("cwd", self.mnt)
        return tools.run(cmd, **kw)

    def timed(self, cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
        t0 = time.perf_counter()
        r = self.run(cmd, **kw)
        return time.perf_counter() - t0, r


def split_list(s: str) -> list[str]:
    return [x.strip() for x in str(s).split(",") if x.strip()]


def missing_tools(part: Part) -> list[str]:
    return [t for t in part.requires if shutil.which(t) is None]


def registry() -> dict[str, Workload]:
    from . import (atime_read, bigfile, coherence, create, depth, dfs, guest, guest_fio,
                   lat_mmap, loopdd, memory, messaging, migrate, real, stat_missing, tree)
    ws = [stat_missing.WORKLOAD, coherence.WORKLOAD, messaging.WORKLOAD, loopdd.WORKLOAD,
          lat_mmap.WORKLOAD, create.WORKLOAD, depth.WORKLOAD, tree.WORKLOAD, atime_read.WORKLOAD,
          memory.WORKLOAD, real.WORKLOAD, dfs.WORKLOAD, bigfile.WORKLOAD, guest.WORKLOAD,
          guest_fio.WORKLOAD, migrate.WORKLOAD]
    return {w.name: w for w in ws}
