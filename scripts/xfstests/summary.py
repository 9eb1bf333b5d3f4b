#!/usr/bin/env python3
"""summary.py RESULTS [CONFIG]: one xfstests run's outcome from check's xunit report
(RESULTS/result.xml): the counts, then every failure and every test not run, with the reason
check gave. With --json, the same as a JSON document."""
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def outcomes(results: Path) -> dict[str, tuple[str, str]]:
    """Test name -> (passed|failed|notrun, check's message)."""
    out = {}
    for case in ET.parse(results / "result.xml").getroot().iter("testcase"):
        name = case.get("name")
        fail = case.find("failure")
        skip = case.find("skipped")
        if fail is not None:
            out[name] = ("failed", fail.get("message", ""))
        elif skip is not None:
            out[name] = ("notrun", skip.get("message", "").strip())
        else:
            out[name] = ("passed", "")
    return out


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--json"]
    results = Path(args[0])
    config = args[1] if len(args) > 1 else results.name
    if not (results / "result.xml").exists():
        print(f"{config}: no result.xml in {results} (see {results}/check.log)")
        return 1
    got = outcomes(results)
    count = {k: sum(1 for s, _ in got.values() if s == k) for k in ("passed", "failed", "notrun")}
    if "--json" in sys.argv:
        print(json.dumps({"config": config, **count,
                          "tests": {n: {"status": s, "message": m} for n, (s, m) in got.items()}},
                         indent=1, sort_keys=True))
        return 0
    ran = count["passed"] + count["failed"]
    print(f"{config}: ran {ran}, passed {count['passed']}, failed {count['failed']}, "
          f"not run {count['notrun']}")
    for status in ("failed", "notrun"):
        for name, (s, msg) in sorted(got.items()):
            if s == status:
                print(f"  {status:7} {name}: {msg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
