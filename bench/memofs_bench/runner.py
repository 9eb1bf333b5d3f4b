"""The runner: rounds of every workload on every target, targets interleaved (A B A B ...) so
drift hits them alike; each target mounted fresh for each workload and always unmounted."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Sequence

from . import env as envmod
from . import mounts, results
from .targets import make_target
from .tools import BenchError, CheckFailed, ToolMissing
from .workloads import Context, Part, Workload, missing_tools

PLACEMENTS = {
    "free": "no pinning: the scheduler places benchmark processes and FUSE server threads",
    "same": "benchmark processes and FUSE server threads all pinned to CPU 0",
    "split": "benchmark processes pinned to CPU 1, FUSE server threads to CPU 0",
}


def _placement_cpus(mode: str) -> tuple[set[int] | None, set[int] | None, str]:
    """(client cpus, server cpus, note) for a placement mode."""
    cpus = sorted(os.sched_getaffinity(0))
    if mode == "free":
        return None, None, ""
    if mode == "same" or len(cpus) < 2:
        note = "" if mode == "same" else f"only CPUs {cpus} available: split became same"
        return {cpus[0]}, {cpus[0]}, note
    return {cpus[1]}, {cpus[0]}, ""


class Console:
    """rich progress when available and stdout is a terminal, plain lines otherwise."""

    def __init__(self, total: int, quiet: bool = False):
        self.total, self.quiet, self.progress, self.task = total, quiet, None, None
        try:
            from rich.console import Console as RichConsole
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                       TextColumn, TimeElapsedColumn)
            console = RichConsole(stderr=True)
            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                     BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                     console=console, disable=quiet, transient=False)
            self.task = self.progress.add_task("starting", total=total)
        except ImportError:
            pass

    def __enter__(self):
        if self.progress:
            self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self.progress:
            self.progress.__exit__(*exc)

    def log(self, msg: str, style: str = "") -> None:
        if self.progress:
            self.progress.console.print(msg, style=style or None, markup=False, highlight=False)
        else:
            print(msg, file=__import__("sys").stderr, flush=True)

    def status(self, msg: str) -> None:
        if self.progress:
            self.progress.update(self.task, description=msg)

    def advance(self) -> None:
        if self.progress:
            self.progress.advance(self.task)


class Runner:
    def __init__(self, workloads: Sequence[Workload], specs: Sequence[str], reps: int, out: Path,
                 overrides: dict[str, dict[str, str]] | None = None, quick: bool = False,
                 placement: str = "free", command: Sequence[str] = (), quiet: bool = False):
        self.workloads, self.specs, self.reps, self.out = list(workloads), list(specs), reps, out
        self.quick, self.placement, self.quiet = quick, placement, quiet
        overrides = overrides or {}
        self.params = {w.name: w.param_values(overrides.get(w.name, {}), quick) for w in workloads}
        self.nofile_note = envmod.raise_nofile_limit()   # before the environment is captured
        client, server, note = _placement_cpus(placement)
        self.client_cpus, self.server_cpus = client, server
        self.failed_targets: set[str] = set()
        self.skipped_parts: set[tuple[str, str]] = set()
        self.failures: list[dict] = []   # the errors that make the run fail
        self.doc = {
            "format": results.FORMAT, "created": envmod.now(), "finished": None,
            "interrupted": False, "command": list(command),
            "env": envmod.capture(envmod.PIPE_ITERS // 10 if quick else envmod.PIPE_ITERS),
            "placement": {"mode": placement, "description": PLACEMENTS[placement],
                          "client_cpus": sorted(client) if client else None,
                          "server_cpus": sorted(server) if server else None, "note": note},
            "reps": reps, "quick": quick,
            "targets": [{"name": s, "mounts": []} for s in self.specs],
            "workloads": [{"name": w.name, "params": self.params[w.name]} for w in workloads],
            "metrics": {}, "samples": [], "errors": [],
        }
        for w in workloads:
            self.doc["metrics"].update(w.metric_docs(self.params[w.name]))
        self.doc["env"]["nofile_note"] = self.nofile_note

    # -- recording ------------------------------------------------------------------------
    def fail(self, target, workload, part, rnd, message: str) -> None:
        """Record a measurement that could not be made (a target that did not mount, a part
        that raised, a missing tool): the run carries on and its exit status is 1."""
        self.failures.append(self.note(target, workload, part, rnd, message))

    def note(self, target, workload, part, rnd, message: str) -> dict:
        """Record a problem with the errors (and in the report) without failing the run."""
        error = {"target": target, "workload": workload, "part": part, "round": rnd,
                 "message": message}
        self.doc["errors"].append(error)
        where = " / ".join(x for x in (target, workload, part) if x)
        self.console.log(f"! {where}: {message}", "bold red")
        return error

    def save(self) -> None:
        results.save(self.out, self.doc)

    # -- running --------------------------------------------------------------------------
    def execute(self) -> dict:
        self.out.mkdir(parents=True, exist_ok=True)
        total = self.reps * len(self.workloads) * len(self.specs)
        workdir = Path(tempfile.mkdtemp(prefix="memofs-bench-"))
        old_affinity = os.sched_getaffinity(0)
        mounts.install_signal_handlers()
        with Console(total, self.quiet) as self.console:
            if self.nofile_note:
                self.console.log(f"note: {self.nofile_note}", "yellow")
            self._check_tools()
            self._prepare()
            self.save()
            try:
                for rnd in range(self.reps):
                    for w in self.workloads:
                        for spec in self.specs:
                            self.console.status(f"round {rnd + 1}/{self.reps} {w.name} on {spec}")
                            self._one(w, spec, rnd, workdir)
                            self.console.advance()
            except KeyboardInterrupt:
                self.doc["interrupted"] = True
                self.console.log("interrupted: every mount was unmounted; partial results kept",
                                 "bold yellow")
                raise
            finally:
                os.sched_setaffinity(0, old_affinity)
                self.doc["finished"] = envmod.now()
                self.save()
                _remove_workdir(workdir)
        return self.doc

    def _check_tools(self) -> None:
        for w in self.workloads:
            for part in w.parts:
                missing = missing_tools(part)
                if missing:
                    self.skipped_parts.add((w.name, part.name))
                    record = self.note if part.optional else self.fail
                    record(None, w.name, part.name, None,
                           f"skipped on every target: {', '.join(missing)} not installed")

    def _prepare(self) -> None:
        """Each workload's one-time preparation (inputs fetched and verified), before any
        round; a workload whose preparation fails is skipped on every target."""
        for w in self.workloads:
            if w.prepare is None or all((w.name, p.name) in self.skipped_parts for p in w.parts):
                continue
            self.console.status(f"preparing {w.name}")
            try:
                w.prepare(self.params[w.name])
            except Exception as e:  # any workload's problem is recorded; the others run
                self.skipped_parts.update((w.name, p.name) for p in w.parts)
                self.fail(None, w.name, None, None, f"preparation failed, skipped: {_why(e)}")

    def _one(self, w: Workload, spec: str, rnd: int, workdir: Path) -> None:
        if spec in self.failed_targets:
            return
        target = make_target(spec, workdir)
        info = next(t for t in self.doc["targets"] if t["name"] == spec)
        if target.in_guest != (w.guest is not None) or target.moves != w.moves:
            where = ("on the mig-* targets only" if w.moves else
                     "in a guest, on the vm-* targets only" if w.guest else "on the host")
            if rnd == 0:
                self.note(spec, w.name, None, None, f"{w.name} runs {where}: not measured on "
                                                    f"{spec}")
            return
        if w.guest is not None:
            target.guest_setup = w.guest(self.params[w.name])
        try:
            mnt = target.mount()
        except Exception as e:  # any target's problem is recorded; the other targets run
            self.failed_targets.add(spec)
            self.fail(spec, w.name, None, rnd, f"{_why(e)} (target skipped from now on)")
            return
        desc: dict = {}
        try:
            self._place(target)
            desc = target.describe()
            desc.update(round=rnd, workload=w.name, client_affinity=sorted(os.sched_getaffinity(0)))
            info["mounts"].append(desc)
            for part in w.parts:
                if part.needs_source and target.source() is None:
                    continue    # e.g. host-side changes on a target with no host directory
                if part.needs_peer and target.peer() is None:
                    continue    # changes from another machine, on a target with none
                if (w.name, part.name) not in self.skipped_parts:
                    self._part(w, part, spec, mnt, rnd, target)
                    self.save()
            stats = target.server_stats()
            if stats is not None:
                desc["server_stats_after"] = stats
        finally:
            target.unmount()
            for note in target.notes:
                self.note(spec, w.name, None, rnd, note)

    def _place(self, target) -> None:
        if self.client_cpus:
            os.sched_setaffinity(0, self.client_cpus)
        if self.server_cpus:
            for pid in target.server_pids():
                mounts.set_affinity_all_threads(pid, self.server_cpus)

    def _part(self, w: Workload, part: Part, spec: str, mnt: Path, rnd: int, target) -> None:
        ctx = Context(mnt=mnt, params=self.params[w.name], source=target.source(),
                      peer=target.peer(),
                      status=lambda s: self.console.status(
                          f"round {rnd + 1}/{self.reps} {w.name} on {spec}: {s}"),
                      stats=target.server_stats, guest=getattr(target, "guest", None),
                      server_cpu=lambda: mounts.tree_cpu_seconds(target.server_pids()),
                      target=target)
        try:
            for metric, label, value, *detail in part.run(ctx):
                sample = {"metric": w.key(metric), "target": spec, "param": label,
                          "value": value, "round": rnd, "time": envmod.now()}
                if detail:
                    sample["detail"] = detail[0]
                self.doc["samples"].append(sample)
        except ToolMissing as e:
            self.skipped_parts.add((w.name, part.name))
            self.fail(spec, w.name, part.name, rnd, f"{e} (part skipped from now on)")
        except CheckFailed as e:
            self.fail(spec, w.name, part.name, rnd, f"CHECK FAILED: {e}")
        except Exception as e:  # any part's problem is recorded; the other parts run
            self.fail(spec, w.name, part.name, rnd, f"{type(e).__name__}: {e}")
            if os.environ.get("MEMOFS_BENCH_DEBUG"):
                self.console.log(traceback.format_exc())
        if "drop_caches" in ctx.notes and not any(
                "drop_caches" in e["message"] for e in self.doc["errors"]):
            self.note(None, w.name, part.name, rnd,
                      "cannot write /proc/sys/vm/drop_caches (not root?): caches not dropped")


def _why(e: Exception) -> str:
    """The message of one of the harness's own errors, else the exception's type and message."""
    return str(e) if isinstance(e, BenchError) else f"{type(e).__name__}: {e}"


def _remove_workdir(workdir: Path) -> None:
    """Remove the scratch folder unless something is still mounted under it."""
    prefix = str(workdir) + "/"
    if any(m["mountpoint"].startswith(prefix) for m in mounts.mounts()):
        return
    with contextlib.suppress(OSError):
        shutil.rmtree(workdir)
