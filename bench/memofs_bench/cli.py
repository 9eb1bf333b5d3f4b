"""memofs-bench command line: list, run, compare, seeds."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections import Counter
from pathlib import Path

from . import compare, inputs, results, targets
from .report import write_report
from .runner import PLACEMENTS, Runner
from .stats import STATISTICS
from .workloads import Workload, registry

USAGE_ERROR = 2
BENCH_DIR = Path(__file__).resolve().parents[1]

# memofs and tmpfs each at their default huge= (never) and with large folios
# (huge=within_size), so that a data-path ratio compares like with like
SEED_TARGETS = ("memofs:-o negative_timeout=0,memofs,memofs:-o negative_timeout=10,"
                "memofs:-o huge=within_size,tmpfs,tmpfs:-o huge=within_size,passthrough_ll")
# seed experiments sized to finish in under 20 minutes on 2 cores with SEED_TARGETS, 3 reps
SEED_PARAMS = {
    "stat-missing": {"loops": "10000", "counts": "10000,1000000"},
    "messaging": {"groups": "1,3,5,7,12,18,24,30,32", "loops": "100"},
    "loopdd": {"size": "256M", "bs": "1M,4k", "loops": "2"},
    "lat-mmap": {"sizes": "64M,128M,256M,512M,1G", "iters": "3"},
}


# the real family on every data path: tmpfs (baseline), memofs with kernel-backed data (with
# and without its CPU latency request), with its own page store, its passthrough backend over
# tmpfs, and libfuse's passthrough_ll
REAL_TARGETS = "tmpfs,memofs,memofs:-o cpu_latency=off,memofs:-o passthrough=off,memofs-pt,passthrough_ll"
RUN_FAILED = 1
# how much of each failure's message the one-line summary keeps: its start and its end (a
# command's own error usually comes last)
SUMMARY_HEAD, SUMMARY_TAIL = 60, 160


class UsageError(Exception):
    pass


def default_out() -> Path:
    base = BENCH_DIR / "results" if (BENCH_DIR / "pyproject.toml").exists() else Path("results")
    return base / dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def parse_params(items: list[str], workloads: list[Workload]) -> dict[str, dict[str, str]]:
    """`k=v` applies to every selected workload with a parameter k; `workload.k=v` to one."""
    out: dict[str, dict[str, str]] = {w.name: {} for w in workloads}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            raise UsageError(f"--param wants KEY=VALUE, got {item!r}")
        wname, dot, pname = key.rpartition(".")
        hits = [w for w in workloads if (not dot or w.name == wname)
                and any(p.name == pname for p in w.params)]
        if not hits:
            raise UsageError(f"no selected workload has a parameter {key!r} "
                             "(see `memofs-bench list`)")
        for w in hits:
            out[w.name][pname] = value
    return out


def select_workloads(names: list[str]) -> tuple[list[Workload], list[str]]:
    reg = registry()
    if names == ["all"]:
        return list(reg.values()), []
    known = [reg[n] for n in names if n in reg]
    return known, [n for n in names if n not in reg]


def select_targets(texts: list[str]) -> tuple[list[str], list[str]]:
    specs, bad = [], []
    for text in texts:
        for spec in targets.split_specs(text):
            try:
                targets.parse_spec(spec)
                if spec not in specs:
                    specs.append(spec)
            except targets.UnknownTarget as e:
                bad.append(str(e))
    return specs, bad


def cmd_list(args) -> int:
    print("Workloads (memofs-bench run NAME...; `all` selects every one):\n")
    for w in registry().values():
        print(f"  {w.name:<14}{w.summary}\n  {'':<14}seed {w.seed}")
        for p in w.params:
            print(f"  {'':<16}--param {p.name}={p.default}   (quick: {p.quick})  {p.help}")
        for m in w.metrics:
            d = "higher" if m.higher_better else "lower"
            print(f"  {'':<16}metric {m.name}: {m.title} [{m.unit}, {d} is better]")
        print()
    print("Target kinds (KIND or KIND:ARGS, e.g. 'memofs:-o negative_timeout=0'):\n")
    for kind, cls in targets.KINDS.items():
        t = cls(kind, [], Path("/tmp"))
        try:
            t.check()
            state = "available"
        except Exception as e:  # report, do not fail: this is a listing
            state = f"unavailable: {e}"
        print(f"  {kind:<16}{cls.summary}\n  {'':<16}{state}")
    print("\nPlacement modes (--placement):\n")
    for k, v in PLACEMENTS.items():
        print(f"  {k:<16}{v}")
    return 0


def execute(workloads: list[Workload], specs: list[str], args, overrides, title: str,
            intro: list[str]) -> int:
    out = Path(args.out) if args.out else default_out()
    runner = Runner(workloads, specs, args.reps, out, overrides, quick=args.quick,
                    placement=args.placement, command=sys.argv, quiet=args.quiet)
    try:
        runner.execute()
    except KeyboardInterrupt:
        print(f"\ninterrupted; partial results in {out}", file=sys.stderr)
        return 130
    c = results.combine([out])
    print(compare.render(c, args.stats))
    report = write_report(c, out, title, args.stats, intro, plots=not args.no_plots)
    print(f"results: {out / results.FILENAME}\nreport:  {report}")
    if runner.failures:
        print(failure_summary(runner.failures), file=sys.stderr)
        return RUN_FAILED
    return 0


def failure_summary(failures: list[dict]) -> str:
    """One line naming every failure as `target / workload / part: why`; a failure repeated
    in several rounds is named once, with its count."""
    counts = Counter(compare.format_error(dict(f, round=None, message=_shorten(f["message"])))
                     for f in failures)
    items = [text + (f" (in {n} rounds)" if n > 1 else "") for text, n in counts.items()]
    return f"memofs-bench: FAILED ({len(failures)}): " + "; ".join(items)


def _shorten(message: str) -> str:
    """The message on one line, its middle left out when it is long."""
    flat = " ".join(message.split())
    if len(flat) <= SUMMARY_HEAD + SUMMARY_TAIL:
        return flat
    return f"{flat[:SUMMARY_HEAD]} ... {flat[-SUMMARY_TAIL:]}"


def cmd_run(args) -> int:
    workloads, bad = select_workloads(args.workloads)
    specs, bad_t = select_targets(args.targets or ["memofs,tmpfs"])
    problems = [f"unknown workload {n!r}; known: {', '.join(registry())}" for n in bad] + bad_t
    for p in problems:
        print(f"memofs-bench: error: {p}", file=sys.stderr)
    if not workloads or not specs:
        return USAGE_ERROR
    if problems:
        print("memofs-bench: running the rest; the exit status will say usage error",
              file=sys.stderr)
    overrides = parse_params(args.param, workloads)
    rc = execute(workloads, specs, args, overrides, "memofs-bench results", [])
    return rc or (USAGE_ERROR if problems else 0)


def cmd_seeds(args) -> int:
    reg = registry()
    workloads = [reg[n] for n in SEED_PARAMS]
    specs, bad = select_targets(args.targets or [SEED_TARGETS])
    for p in bad:
        print(f"memofs-bench: error: {p}", file=sys.stderr)
    if not specs:
        return USAGE_ERROR
    overrides = {} if args.quick else {k: dict(v) for k, v in SEED_PARAMS.items()}
    for k, v in parse_params(args.param, workloads).items():
        overrides.setdefault(k, {}).update(v)
    intro = ["The experiments of the three seed patch series, reproduced on FUSE targets:",
             "", "- 000 (S_NOATIME for pseudo inodes): `messaging`",
             "- 001 (FUSE negative dentry timeout): `stat-missing`",
             "- 002 (tmpfs / page allocator overhead): `loopdd`, `lat-mmap`"]
    rc = execute(workloads, specs, args, overrides, "memofs-bench: the seed experiments", intro)
    return rc or (USAGE_ERROR if bad else 0)


def cmd_real(args) -> int:
    w = registry()["real"]
    specs, bad = select_targets(args.targets or [REAL_TARGETS])
    for p in bad:
        print(f"memofs-bench: error: {p}", file=sys.stderr)
    if not specs:
        return USAGE_ERROR
    intro = ["Real programs on real trees (pinned releases; see `bench/README.md`), each step "
             "timed on its own and its result checked. Requests per step come from "
             "`memofs stats --json` (memofs targets only)."]
    rc = execute([w], specs, args, parse_params(args.param, [w]),
                 "memofs-bench: real workloads", intro)
    return rc or (USAGE_ERROR if bad else 0)


def cmd_fetch(args) -> int:
    """Run the preparation (download, verify, repack) of workloads that have one, for their
    normal and their quick parameters, so later runs need no network."""
    workloads, bad = select_workloads(args.workloads or ["all"])
    for n in bad:
        print(f"memofs-bench: error: unknown workload {n!r}", file=sys.stderr)
    failed = False
    for w in workloads:
        if w.prepare is None:
            continue
        for quick in (False, True):
            try:
                w.prepare(w.param_values({}, quick))
            except Exception as e:  # report every workload's problem, then fail
                print(f"memofs-bench: {w.name}: {e}", file=sys.stderr)
                failed = True
                break
        else:
            print(f"{w.name}: inputs ready in {inputs.inputs_dir()}")
    return USAGE_ERROR if bad else (RUN_FAILED if failed else 0)


def cmd_compare(args) -> int:
    folders = [Path(d) for d in args.dirs]
    for f in folders:
        if not (f / results.FILENAME).exists() and not f.is_file():
            print(f"memofs-bench: error: no {results.FILENAME} in {f}", file=sys.stderr)
            return USAGE_ERROR
    try:
        c = results.combine(folders)
        text = compare.render(c, args.stats)
    except ValueError as e:
        print(f"memofs-bench: error: {e}", file=sys.stderr)
        return USAGE_ERROR
    print(text)
    if not args.no_plots:
        out = Path(args.report_dir) if args.report_dir else folders[0]
        report = write_report(c, out, "memofs-bench comparison", args.stats)
        print(f"report: {report}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="memofs-bench", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="workloads, their parameters, and target kinds")

    def common(p):
        p.add_argument("--targets", "-t", action="append", metavar="T1,T2",
                       help="targets, baseline first (repeatable); e.g. "
                            "'memofs,memofs:-o negative_timeout=0,tmpfs,passthrough_ll'")
        p.add_argument("--reps", type=int, default=3, help="rounds (default 3)")
        p.add_argument("--out", help="results folder (default bench/results/<timestamp>)")
        p.add_argument("--param", "-p", action="append", default=[], metavar="[WORKLOAD.]K=V",
                       help="override a workload parameter (repeatable)")
        p.add_argument("--quick", action="store_true", help="tiny parameters (smoke run)")
        p.add_argument("--placement", choices=list(PLACEMENTS), default="free",
                       help="CPU placement of benchmark and server (default free)")
        p.add_argument("--stats", type=lambda s: s.split(","), default=None,
                       help="table rows, e.g. Min,mean,Median,Stddev,Max")
        p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
        p.add_argument("--quiet", "-q", action="store_true", help="no progress display")

    run = sub.add_parser("run", help="run workloads on targets and save the samples")
    run.add_argument("workloads", nargs="+", metavar="WORKLOAD")
    common(run)
    seeds = sub.add_parser("seeds", help="the three seed experiments with a Markdown report")
    common(seeds)
    real = sub.add_parser("real", help="the real workload family on tmpfs, memofs (both data "
                                       "modes), memofs-pt and passthrough_ll")
    common(real)
    fetch = sub.add_parser("fetch", help="download, verify and prepare workload inputs "
                                         "(the real family's releases) into the cache")
    fetch.add_argument("workloads", nargs="*", metavar="WORKLOAD")
    cmp = sub.add_parser("compare", help="mmtests-style tables (and plots) from saved results")
    cmp.add_argument("dirs", nargs="+", metavar="DIR")
    cmp.add_argument("--stats", type=lambda s: s.split(","), default=None)
    cmp.add_argument("--no-plots", action="store_true", help="only print the tables")
    cmp.add_argument("--report-dir", help="where plots/ and report.md go (default: first DIR)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "reps", 1) < 1:
        print("memofs-bench: error: --reps must be at least 1", file=sys.stderr)
        return USAGE_ERROR
    bad = [s for s in getattr(args, "stats", None) or [] if s not in STATISTICS and s.lower() not in ("mean",)]
    if bad:
        print(f"memofs-bench: error: unknown statistic(s) {', '.join(bad)}; "
              f"known: {', '.join(STATISTICS)}, mean", file=sys.stderr)
        return USAGE_ERROR
    try:
        return {"list": cmd_list, "run": cmd_run, "seeds": cmd_seeds, "real": cmd_real,
                "fetch": cmd_fetch, "compare": cmd_compare}[args.command](args)
    except UsageError as e:
        print(f"memofs-bench: error: {e}", file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:          # e.g. `memofs-bench list | head`
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

