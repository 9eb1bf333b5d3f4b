#!/usr/bin/env python3
"""report.py [--ref CONFIG] RESULTS CONFIG...: one markdown report of xfstests runs
(scripts/xfstests/run.sh and guest.sh leave each in RESULTS/CONFIG): per configuration ran,
passed, failed and not run; every failure with check's message and the first lines of its
output's difference; every test not run that the reference (default tmpfs) ran, with the
reason; and, against the reference, the failures it does not have."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from summary import outcomes  # noqa: E402


def first_diff(results: Path, test: str, lines: int = 6) -> str:
    """The first lines of what the test printed that its golden output does not have."""
    bad = results / f"{test}.out.bad"
    if not bad.exists():
        return ""
    src = Path(__file__).resolve().parents[2] / "target/xfstests/src/tests" / f"{test}.out"
    want = set(src.read_text(errors="replace").splitlines()) if src.exists() else set()
    extra = [l for l in bad.read_text(errors="replace").splitlines() if l not in want]
    return "; ".join(l.strip() for l in extra[:lines])[:400]


def main() -> int:
    args = sys.argv[1:]
    refname = "tmpfs"
    if args[:1] == ["--ref"]:
        refname, args = args[1], args[2:]
    base = Path(args[0])
    configs = args[1:]
    got = {c: outcomes(base / c) for c in configs if (base / c / "result.xml").exists()}
    ref = got.get(refname, {})
    out = ["# xfstests results", "",
           f"| configuration | ran | passed | failed | not run | failed where {refname} passed |",
           "|---|---|---|---|---|---|"]
    for c, res in got.items():
        n = {k: sum(1 for s, _ in res.values() if s == k) for k in ("passed", "failed", "notrun")}
        worse = [t for t, (s, _) in res.items() if s == "failed" and ref.get(t, ("", ""))[0] == "passed"]
        out.append(f"| {c} | {n['passed'] + n['failed']} | {n['passed']} | {n['failed']} | "
                   f"{n['notrun']} | {len(worse) if ref else '-'} |")
    for c, res in got.items():
        out += ["", f"## {c}", ""]
        fails = sorted(t for t, (s, _) in res.items() if s == "failed")
        out.append(f"Failed ({len(fails)}):" if fails else "Failed: none.")
        for t in fails:
            there = ref.get(t, (f"not in the {refname} run", ""))[0] if ref else "-"
            out.append(f"- `{t}` ({refname}: {there}): {first_diff(base / c, t) or res[t][1]}")
        skipped = sorted(t for t, (s, _) in res.items()
                         if s == "notrun" and ref.get(t, ("notrun", ""))[0] != "notrun")
        if c != refname:
            out += ["", f"Not run here but run on {refname} ({len(skipped)}):" if skipped
                    else f"Not run here but run on {refname}: none."]
            out += [f"- `{t}`: {res[t][1]}" for t in skipped]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
