"""The on-disk results format: one `results.json` per run folder, rewritten atomically after
every sample so an interrupted run still leaves everything measured so far.

    {"format": "memofs-bench/1", "created": ..., "finished": ..., "command": [...],
     "env": {...}, "placement": {...},
     "targets": [{"name": spec, "kind": ..., "options": ..., "mounts": [...]}],   # baseline first
     "workloads": [{"name": ..., "params": {...}}],
     "metrics": {key: {"workload", "title", "unit", "higher_better", "param_name", "row_label",
                       "params": [...]}},
     "samples": [{"metric", "target", "param", "value", "round", "time"}],
     "errors": [{"target", "workload", "part", "round", "message"}]}
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

FORMAT = "memofs-bench/1"
FILENAME = "results.json"


def save(path: Path, doc: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path, prefix=".results.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path / FILENAME)


def load(path: Path) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / FILENAME
    with open(p) as f:
        doc = json.load(f)
    if doc.get("format") != FORMAT:
        raise ValueError(f"{p}: not a memofs-bench results file (format {doc.get('format')!r})")
    return doc


@dataclass
class Combined:
    """Results from one or more run folders, ready for tables and plots."""

    targets: list[str] = field(default_factory=list)          # baseline first
    metrics: dict[str, dict] = field(default_factory=dict)    # in first-seen order
    samples: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    docs: list[tuple[str, dict]] = field(default_factory=list)  # (folder, document)

    def values(self, metric: str) -> dict[str, dict[str, list[float]]]:
        """metric -> {target: {param: [values...]}}"""
        out: dict[str, dict[str, list[float]]] = {}
        for s in self.samples:
            if s["metric"] == metric:
                out.setdefault(s["target"], {}).setdefault(s["param"], []).append(s["value"])
        return out

    def params(self, metric: str) -> list[str]:
        """Row parameters that have samples, in the declared order, then any others."""
        seen: list[str] = []
        for s in self.samples:
            if s["metric"] == metric and s["param"] not in seen:
                seen.append(s["param"])
        declared = [p for p in self.metrics[metric].get("params") or [] if p in seen]
        return declared + [p for p in seen if p not in declared]

    def workloads(self) -> list[str]:
        seen: list[str] = []
        for m in self.metrics.values():
            if m["workload"] not in seen:
                seen.append(m["workload"])
        return seen


def combine(folders: Iterable[Path]) -> Combined:
    """Merge run folders. A target name seen in more than one folder is told apart by a
    `folder:` prefix so the same configuration measured twice can be compared with itself."""
    docs = [(str(f), load(f)) for f in folders]
    names: dict[str, int] = {}
    for _, d in docs:
        for t in d["targets"]:
            names[t["name"]] = names.get(t["name"], 0) + 1
    c = Combined(docs=docs)

    for folder, d in docs:
        def rename(t: str, folder=folder) -> str:
            return f"{Path(folder).name}:{t}" if names.get(t, 0) > 1 else t

        for t in d["targets"]:
            if rename(t["name"]) not in c.targets:
                c.targets.append(rename(t["name"]))
        for key, m in d["metrics"].items():
            if key not in c.metrics:
                c.metrics[key] = dict(m)
            else:
                known = c.metrics[key].setdefault("params", [])
                known.extend(p for p in m.get("params", []) if p not in known)
        c.samples.extend(dict(s, target=rename(s["target"])) for s in d["samples"])
        c.errors.extend(dict(e, target=rename(e["target"]) if e.get("target") else None)
                        for e in d.get("errors", []))
    return c
