"""Comparison tables in the mmtests layout.

    stat-missing inproc: stat() of a missing path, in-process [stats/s, higher is better]
                                  tmpfs               passthrough_ll
                                default                      default
    Hmean     10000   742000.0000 (   0.00%)    90000.0000 * -87.87%*

The first target is the baseline. Each cell is `value (pct%)` where pct is the difference to the
baseline, positive when better; the cell reads `value *pct%*` when the difference is significant
(see `stats.significance`). Stddev and CoeffVar count lower as better whatever the metric.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from . import stats as st
from .results import Combined

PCT_WIDTH = 11  # len(" (  -5.00%)")

HEADER = (
    "Baseline: the first target. Cells: value (difference to the baseline, positive = better).\n"
    f"Significance: {st.TEST_NAME}, p < {st.ALPHA}:\n"
    "a significant difference reads *x.xx%* instead of (x.xx%). Hmean rows are tested on the\n"
    "reciprocals; Min, Max and Stddev rows carry no test. Rates use Hmean, times Amean;\n"
    "Stddev counts lower as better."
)


def central(metric: Mapping) -> str:
    return "Hmean" if metric["higher_better"] else "Amean"


def default_stats(metric: Mapping) -> list[str]:
    return ["Min", central(metric), "Stddev", "Max"]


def resolve_stats(metric: Mapping, wanted: Sequence[str] | None) -> list[str]:
    if not wanted:
        return default_stats(metric)
    out = []
    for s in wanted:
        s = central(metric) if s.lower() in ("mean", "central") else s
        if s not in st.STATISTICS:
            raise ValueError(f"unknown statistic {s!r}; known: {', '.join(st.STATISTICS)}, mean")
        out.append(s)
    return out


def split_target(name: str) -> tuple[str, str]:
    """'memofs:-o negative_timeout=0' -> ('memofs', '-o negative_timeout=0'); the two header rows."""
    kind, _, opts = name.partition(":")
    return kind, (opts.strip() or "default")


def _stat_better_high(stat: str, higher_better: bool) -> bool:
    return False if stat in ("Stddev", "CoeffVar") else higher_better


def format_table(metric: Mapping, targets: Sequence[str],
                 data: Mapping[str, Mapping[str, Sequence[float]]],
                 params: Sequence[str] | None = None,
                 stats: Sequence[str] | None = None) -> str:
    """One mmtests-style table. `data` is {target: {param: [samples]}}; the first target in
    `targets` is the baseline. Returns the table without a trailing newline."""
    stat_names = resolve_stats(metric, stats)
    if params is None:
        params = []
        for t in targets:
            params.extend(p for p in data.get(t, {}) if p not in params)
    hb = bool(metric["higher_better"])
    base_t = targets[0]
    label_of = {s: (metric.get("row_label") or s) if s == central(metric) else s
                for s in stat_names}

    # rows: (label, [(value, pct, significant) or None per target])
    rows = []
    for s in stat_names:
        fn = st.STATISTICS[s]
        for p in params:
            base = data.get(base_t, {}).get(p)
            cells = []
            for t in targets:
                xs = data.get(t, {}).get(p)
                if not xs:
                    cells.append(None)
                    continue
                v = fn(xs)
                if t == base_t or not base:
                    cells.append((v, 0.0 if t == base_t else None, False))
                    continue
                pct = st.pct_better(fn(base), v, _stat_better_high(s, hb))
                test = st.significance(s, base, xs)
                cells.append((v, pct, bool(test and test.significant)))
            rows.append((f"{label_of[s]:<10}{p}".rstrip(), cells))

    heads = [split_target(t) for t in targets]
    lw = max([len(r[0]) for r in rows] + [len(metric["workload"]) + 2, 8])
    vw = []
    for i in range(len(targets)):
        ws = [len(f"{c[0]:.4f}") for _, cells in rows if (c := cells[i]) is not None]
        vw.append(max(ws + [3]))

    def cell(i: int, c) -> str:
        if c is None:
            return "-"       # no samples: a dash at the right edge of the column
        v, pct, sig = c
        if pct is None:
            return f"{v:{vw[i]}.4f}" + " " * PCT_WIDTH
        return f"{v:{vw[i]}.4f} *{pct:7.2f}%*" if sig else f"{v:{vw[i]}.4f} ({pct:7.2f}%)"

    texts = [(label, [cell(i, c) for i, c in enumerate(cells)]) for label, cells in rows]
    cw = [max([len(t[1][i]) for t in texts] + [len(heads[i][0]), len(heads[i][1])])
          for i in range(len(targets))]

    unit = metric.get("unit", "")
    direction = "higher" if hb else "lower"
    out = [f"{metric['workload']} {metric['title']} [{unit}, {direction} is better]"]
    for row in (0, 1):
        out.append((" " * lw + "".join(f"  {heads[i][row]:>{cw[i]}}"
                                       for i in range(len(targets)))).rstrip())
    for label, cells in texts:
        out.append((f"{label:<{lw}}" + "".join(f"  {c:>{cw[i]}}"
                                                for i, c in enumerate(cells))).rstrip())
    return "\n".join(out)


def tables(c: Combined, stats: Sequence[str] | None = None,
           workloads: Sequence[str] | None = None) -> list[tuple[str, str, str]]:
    """[(workload, metric key, table text)] for every metric with samples."""
    out = []
    for key, m in c.metrics.items():
        if workloads and m["workload"] not in workloads:
            continue
        data = c.values(key)
        if not data:
            continue
        targets = c.targets
        out.append((m["workload"], key, format_table(m, targets, data, c.params(key), stats)))
    return out


def _num(v: float, integers: bool) -> str:
    return f"{v:.0f}" if integers else f"{v:.3f}"


def summary_table(c: Combined, key: str) -> str:
    """Markdown table of one metric: a row per parameter, a column per target, cells the
    median over rounds and, where the baseline (first target) has samples, the ratio to its
    median (`1.80x`: 1.8 times the baseline's value)."""
    m, data = c.metrics[key], c.values(key)
    targets = [t for t in c.targets if t in data]
    base = data.get(c.targets[0], {}) if c.targets else {}
    ints = all(float(v).is_integer() for per in data.values() for xs in per.values() for v in xs)
    lines = [f"{m['title']} [{m['unit']}]: median over rounds"
             + (f" (ratio to {c.targets[0]})" if base else ""), "",
             "| " + " | ".join([m.get("param_name") or "param", *targets]) + " |",
             "|" + "---|" * (len(targets) + 1)]
    for p in c.params(key):
        cells = [p]
        for t in targets:
            xs = data[t].get(p)
            if not xs:
                cells.append("-")
                continue
            med = st.median(xs)
            ref = st.median(base[p]) if base.get(p) else None
            cells.append(_num(med, ints) + (f" ({med / ref:.2f}x)" if ref and t != c.targets[0] else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ops_table(c: Combined, key: str, top: int = 4) -> str | None:
    """Markdown table of the per-opcode detail of a metric's samples (e.g. FUSE requests by
    opcode), from the median round of each target and parameter; None if there is none."""
    rows: dict[str, dict[str, list[dict]]] = {}
    for s in c.samples:
        if s["metric"] == key and isinstance(s.get("detail"), dict) and "ops" in s["detail"]:
            rows.setdefault(s["param"], {}).setdefault(s["target"], []).append(s)
    if not rows:
        return None
    targets = [t for t in c.targets if any(t in r for r in rows.values())]
    lines = [f"{c.metrics[key]['title']} by opcode (the round with the median total; "
             f"the {top} largest)", "",
             "| " + " | ".join([c.metrics[key].get("param_name") or "param", *targets]) + " |",
             "|" + "---|" * (len(targets) + 1)]
    for p in c.params(key):
        cells = [p]
        for t in targets:
            got = sorted(rows.get(p, {}).get(t, []), key=lambda s: s["value"])
            if not got:
                cells.append("-")
                continue
            ops = got[(len(got) - 1) // 2]["detail"]["ops"]
            best = sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))
            text = ", ".join(f"{op} {n}" for op, n in best[:top])
            cells.append(text + (f", +{len(best) - top} more" if len(best) > top else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summaries(c: Combined, workload: str | None = None) -> list[str]:
    """The median/ratio tables (and opcode tables) of every metric marked `summary`."""
    out = []
    for key, m in c.metrics.items():
        if m.get("summary") and c.values(key) and workload in (None, m["workload"]):
            out.append(summary_table(c, key))
            ops = ops_table(c, key)
            if ops:
                out.append(ops)
    return out


def render(c: Combined, stats: Sequence[str] | None = None) -> str:
    parts = [HEADER, ""]
    for _, _, text in tables(c, stats):
        parts += [text, ""]
    for text in summaries(c):
        parts += [text, ""]
    if c.errors:
        parts.append("Problems during the run(s):")
        parts += [f"  - {format_error(e)}" for e in c.errors]
    return "\n".join(parts).rstrip() + "\n"


def format_error(e: Mapping) -> str:
    where = " / ".join(str(x) for x in (e.get("target"), e.get("workload"), e.get("part")) if x)
    rnd = f" (round {e['round'] + 1})" if e.get("round") is not None else ""
    return f"{where}{rnd}: {e['message']}"
