"""Plots (one PNG per workload, a panel per metric) and the Markdown report."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from . import compare, stats as st
from .env import summary_lines
from .results import Combined
from .tools import parse_size


def plot_workloads(c: Combined, outdir: Path) -> dict[str, Path]:
    """Value vs parameter, one line per target, error bars = one standard deviation."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for wl in c.workloads():
        keys = [k for k, m in c.metrics.items() if m["workload"] == wl and c.values(k)]
        if not keys:
            continue
        fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4.2), squeeze=False)
        for ax, key in zip(axes[0], keys):
            _panel(ax, c, key)
        fig.suptitle(f"{wl}  (error bars: ±1 stddev)", fontsize=11)
        fig.tight_layout()
        path = outdir / f"{wl}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written[wl] = path
    return written


def _panel(ax, c: Combined, key: str) -> None:
    m = c.metrics[key]
    params = c.params(key)
    data = c.values(key)
    centre = st.STATISTICS[compare.central(m)]
    n = max(len(c.targets), 1)
    ordinal = all(_is_number(p) for p in params)   # join points only along a numeric axis
    for i, t in enumerate(c.targets):
        xs, ys, es = [], [], []
        for j, p in enumerate(params):
            vals = data.get(t, {}).get(p)
            if vals:
                xs.append(j + (i - (n - 1) / 2) * 0.06)   # small dodge so bars do not overlap
                ys.append(centre(vals))
                es.append(st.stddev(vals))
        if xs:
            ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=t,
                        linestyle="-" if ordinal and len(xs) > 1 else "none")
    ax.set_xlim(-0.5, len(params) - 0.5)
    ax.set_xticks(range(len(params)))
    many = len(params) > 12      # long lists of named steps: steeper, right-aligned labels
    ax.set_xticklabels(params, rotation=60 if many else 30 if len(params) > 6 else 0,
                       ha="right" if many else "center")
    ax.set_xlabel(m.get("param_name") or "")
    direction = "higher" if m["higher_better"] else "lower"
    ax.set_ylabel(f"{compare.central(m)} {m['unit']} ({direction} is better)")
    ax.set_title(m["title"], fontsize=10)
    if m["unit"] in ("stats/s",):
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _is_number(p: str) -> bool:
    try:
        parse_size(p)
        return True
    except ValueError:
        return False


def markdown(c: Combined, plots: dict[str, Path], outdir: Path, title: str,
             stats: Sequence[str] | None = None, intro: Sequence[str] = ()) -> str:
    lines = [f"# {title}", "", *intro]
    for folder, doc in c.docs:
        lines += ["", f"## Run `{folder}`", "", "```", *summary_lines(doc["env"]),
                  f"placement: {doc['placement']['mode']}: {doc['placement']['description']}"
                  + (f" ({doc['placement']['note']})" if doc['placement'].get('note') else ""),
                  f"reps: {doc['reps']}{' (quick parameters)' if doc.get('quick') else ''}",
                  f"interrupted: {doc.get('interrupted')}", "```", "",
                  "Targets (baseline first): " + ", ".join(f"`{t['name']}`" for t in doc["targets"]),
                  "", "Parameters:", ""]
        lines += [f"- `{w['name']}`: " + ", ".join(f"{k}={v}" for k, v in w["params"].items())
                  for w in doc["workloads"]]
    lines += ["", "## How to read the tables", "", "```", compare.HEADER, "```"]
    by_wl: dict[str, list[str]] = {}
    for wl, _, text in compare.tables(c, stats):
        by_wl.setdefault(wl, []).append(text)
    for wl in c.workloads():
        lines += ["", f"## {wl}", ""]
        for text in compare.summaries(c, wl):
            lines += [text, ""]
        if wl in by_wl:
            lines += ["```", "\n\n".join(by_wl[wl]), "```"]
        else:
            lines.append("No samples.")
        if wl in plots:
            lines += ["", f"![{wl}]({_rel(plots[wl], outdir)})"]
    if c.errors:
        lines += ["", "## Problems", ""]
        lines += [f"- {compare.format_error(e)}" for e in c.errors]
    return "\n".join(lines) + "\n"


def _rel(p: Path, base: Path) -> str:
    try:
        return str(p.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(p)


def write_report(c: Combined, outdir: Path, title: str, stats: Sequence[str] | None = None,
                 intro: Sequence[str] = (), plots: bool = True) -> Path:
    written = plot_workloads(c, outdir / "plots") if plots else {}
    path = outdir / "report.md"
    path.write_text(markdown(c, written, outdir, title, stats, intro))
    return path
