import json

import pytest

from memofs_bench import cli, compare, results, targets

MESSAGING = {"workload": "messaging", "title": "perf-pipe", "unit": "s", "higher_better": False}
MESSAGING_DATA = {
    "vanilla": {"1": [0.48, 0.49, 0.47], "18": [8.8, 8.9, 8.92]},
    "patched:-o x=1": {"1": [0.46, 0.47, 0.46], "18": [6.8, 6.9, 6.8]},
}

# Amean 18: (8.8 + 8.9 + 8.92) / 3 = 8.8733 vs 6.8333: 22.99% better, Welch p << 0.05;
# Amean 1: 0.48 vs 0.4633, 3.47% better, p ~ 0.08: not significant.
EXPECTED_MESSAGING = """\
messaging perf-pipe [s, lower is better]
                        vanilla            patched
                        default             -o x=1
Min       1   0.4700 (   0.00%)  0.4600 (   2.13%)
Min       18  8.8000 (   0.00%)  6.8000 (  22.73%)
Amean     1   0.4800 (   0.00%)  0.4633 (   3.47%)
Amean     18  8.8733 (   0.00%)  6.8333 *  22.99%*
Stddev    1   0.0100 (   0.00%)  0.0058 (  42.26%)
Stddev    18  0.0643 (   0.00%)  0.0577 (  10.20%)
Max       1   0.4900 (   0.00%)  0.4700 (   4.08%)
Max       18  8.9200 (   0.00%)  6.9000 (  22.65%)"""

EXPECTED_RATE = """\
stat-missing inproc [stats/s, higher is better]
                               tmpfs                memofs
                             default               default
Min       1000  1000.0000 (   0.00%)  1800.0000 (  80.00%)
Hmean     1000  1000.0000 (   0.00%)  1986.6221 *  98.66%*
Stddev    1000     0.0000 (   0.00%)   200.0000 (   -inf%)
Max       1000  1000.0000 (   0.00%)  2200.0000 ( 120.00%)"""

EXPECTED_PROCS = """\
lat-mmap latency [usecs, lower is better]
                                 a                   b        c
                           default             default  default
Procs     64M  105.0000 (   0.00%)  85.0000 (  19.05%)        -"""


def test_table_mmtests_layout_times():
    assert compare.format_table(MESSAGING, list(MESSAGING_DATA), MESSAGING_DATA) == \
        EXPECTED_MESSAGING


def test_table_rates_use_hmean():
    m = {"workload": "stat-missing", "title": "inproc", "unit": "stats/s", "higher_better": True}
    data = {"tmpfs": {"1000": [1000.0, 1000.0, 1000.0]},
            "memofs": {"1000": [2000.0, 1800.0, 2200.0]}}
    assert compare.format_table(m, ["tmpfs", "memofs"], data) == EXPECTED_RATE


def test_table_row_label_and_missing_target():
    m = {"workload": "lat-mmap", "title": "latency", "unit": "usecs", "higher_better": False,
         "row_label": "Procs"}
    data = {"a": {"64M": [100.0, 110.0]}, "b": {"64M": [90.0, 80.0]}}
    assert compare.format_table(m, ["a", "b", "c"], data, stats=["mean"]) == EXPECTED_PROCS


def test_table_baseline_order_matters():
    flipped = compare.format_table(MESSAGING, list(MESSAGING_DATA)[::-1], MESSAGING_DATA)
    assert "6.8333 (   0.00%)" in flipped
    assert "8.8733 * -29.85%*" in flipped


def test_unknown_statistic():
    with pytest.raises(ValueError):
        compare.format_table(MESSAGING, ["vanilla"], MESSAGING_DATA, stats=["Bogus"])


def test_split_target_specs():
    assert targets.split_specs("memofs:-o negative_timeout=0,attr_timeout=1,tmpfs,"
                               "passthrough_ll:-o timeout=10,bindfs") == [
        "memofs:-o negative_timeout=0,attr_timeout=1", "tmpfs",
        "passthrough_ll:-o timeout=10", "bindfs"]
    assert targets.split_specs("tmpfs,nosuch") == ["tmpfs", "nosuch"]
    assert targets.parse_spec("memofs:-o negative_timeout=10") == \
        ("memofs", ["-o", "negative_timeout=10"])
    with pytest.raises(targets.UnknownTarget):
        targets.parse_spec("nosuch")


def test_memofs_bin_override(tmp_path):
    t = targets.make_target("memofs:--bin=/opt/old/memofs -o size=1g", tmp_path)
    assert t.binary() == "/opt/old/memofs"
    assert t.args == ["-o", "size=1g"], "--bin= is not a mount argument"
    assert targets.make_target("memofs:-o size=1g", tmp_path).bin_override is None


def test_param_overrides():
    from memofs_bench.workloads import registry
    ws = [registry()["messaging"], registry()["loopdd"]]
    got = cli.parse_params(["loops=5", "messaging.groups=1,2"], ws)
    assert got == {"messaging": {"loops": "5", "groups": "1,2"}, "loopdd": {"loops": "5"}}
    with pytest.raises(cli.UsageError):
        cli.parse_params(["nosuch=1"], ws)
    with pytest.raises(cli.UsageError):
        cli.parse_params(["loops"], ws)


def _doc(target_values):
    return {
        "format": results.FORMAT, "env": {}, "placement": {"mode": "free"}, "reps": 2,
        "targets": [{"name": t} for t in target_values],
        "workloads": [{"name": "messaging", "params": {}}],
        "metrics": {"messaging/perf-pipe": dict(MESSAGING, params=["1", "18"])},
        "samples": [{"metric": "messaging/perf-pipe", "target": t, "param": p, "value": v,
                     "round": i}
                    for t, by_p in target_values.items() for p, vs in by_p.items()
                    for i, v in enumerate(vs)],
        "errors": [{"target": "bindfs", "workload": "messaging", "part": None, "round": 0,
                    "message": "mount failed"}],
    }


def test_combine_and_render(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    results.save(a, _doc({"vanilla": MESSAGING_DATA["vanilla"]}))
    results.save(b, _doc({"vanilla": MESSAGING_DATA["patched:-o x=1"]}))
    c = results.combine([a, b])
    assert c.targets == ["a:vanilla", "b:vanilla"]   # same name in two folders: prefixed
    assert c.params("messaging/perf-pipe") == ["1", "18"]
    text = compare.render(c)
    assert "Welch's t-test" in text.splitlines()[1]
    assert "Amean     18  8.8733 (   0.00%)  6.8333 *  22.99%*" in text
    assert "bindfs / messaging (round 1): mount failed" in text


def test_load_rejects_other_json(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError):
        results.load(tmp_path)
