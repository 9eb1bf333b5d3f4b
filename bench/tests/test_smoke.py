"""Smoke runs: every workload with tiny parameters on a fresh tmpfs target, plus the runner's
failure handling (a target that fails to mount, a missing tool, an unknown name, Ctrl-C) and
the real FUSE peers' mount/unmount. Values are checked for sanity, never for speed."""

import math
import shutil
import subprocess
from pathlib import Path

import pytest

from memofs_bench import cli, mounts, results
from memofs_bench.runner import Runner
from memofs_bench.targets import make_target
from memofs_bench.env import summary_lines
from memofs_bench.tools import ToolMissing, helper
from memofs_bench.workloads import Metric, Part, Workload, registry

pytestmark = pytest.mark.smoke
# the real family needs downloaded inputs, the guest families guests and the migrate family
# two QEMUs: their own smoke tests are in test_real.py and test_guest.py
SMOKE = {n: w for n, w in registry().items()
         if n not in ("real", "guest", "guest-fio", "migrate")}


def our_mounts():
    return [m for m in mounts.mounts()
            if "memofs-bench-" in m["mountpoint"] or m["source"].startswith("memofs-bench")]


@pytest.fixture(autouse=True)
def no_leftover_mounts():
    """Every test must leave the mount table as it found it (other runs may own mounts)."""
    before = our_mounts()
    yield
    assert our_mounts() == before, "a mount was left behind"


@pytest.fixture(scope="module")
def smoke_doc(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    before = our_mounts()
    doc = Runner(list(SMOKE.values()), ["tmpfs"], reps=2, out=out, quick=True,
                 quiet=True).execute()
    assert our_mounts() == before, "a mount was left behind"
    doc["_out"] = out
    return doc


def samples(doc, key):
    return [s for s in doc["samples"] if s["metric"] == key]


# Parts whose tool is not on PATH unless installed by hand or put there by `make
# bench-reports`: missing, they are reported as skipped, never as passed.
NOT_INSTALLABLE = {("memory", "fsstress"): "xfstests' fsstress has no Debian package "
                                           "(bench/fsstress-build.sh installs it from "
                                           "third_party/xfstests)"}


def missing_parts(doc, name):
    return {e["part"] for e in doc["errors"]
            if e["workload"] == name and "not installed" in e["message"]}


@pytest.mark.parametrize("name", list(SMOKE))
def test_workload_smoke_on_tmpfs(smoke_doc, name):
    w = SMOKE[name]
    missing = missing_parts(smoke_doc, name)
    uninstallable = {p for (n, p) in NOT_INSTALLABLE if n == name}
    assert missing <= ({"perf-pipe"} if name == "messaging" else set()) | uninstallable, \
        smoke_doc["errors"]
    other = [e for e in smoke_doc["errors"] if e["workload"] == name and e["part"] not in missing]
    assert other == []
    params = smoke_doc["workloads"][[x["name"] for x in smoke_doc["workloads"]].index(name)]
    for part in w.parts:
        if part.name in missing or part.needs_source or part.needs_peer:
            continue    # tmpfs exports no host directory and has no other machine
        for metric in part.metrics:
            key = w.key(metric)
            got = samples(smoke_doc, key)
            assert got, f"no samples for {key}"
            assert {s["round"] for s in got} == {0, 1}
            # Rates and times are positive; costs (memory, a server's CPU) may be zero (tmpfs
            # has no server).
            m = w.metric(metric)
            zero_ok = not m.higher_better and (w.name == "memory" or m.server_cost)
            floor_ok = (lambda v: v >= 0) if zero_ok else (lambda v: v > 0)
            assert all(math.isfinite(s["value"]) and floor_ok(s["value"]) for s in got)
            labels = {s["param"] for s in got}
            assert labels == set(smoke_doc["metrics"][key]["params"]) & labels
            assert labels, params


@pytest.mark.parametrize("name,part", list(NOT_INSTALLABLE))
def test_uninstallable_part_ran_or_is_skipped(smoke_doc, name, part):
    """The part ran where its tool is there; where it is not, the run noted it as not
    installed (checked above) and this test says so as a skip."""
    w = SMOKE[name]
    p = next(p for p in w.parts if p.name == part)
    if part in missing_parts(smoke_doc, name):
        assert not all(shutil.which(t) for t in p.requires)
        pytest.skip(f"{name}/{part} not run: {NOT_INSTALLABLE[(name, part)]}")
    assert all(samples(smoke_doc, w.key(m)) for m in p.metrics)


def test_messaging_perf_part(smoke_doc):
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed (apt-get install linux-perf): "
                    "messaging's perf-pipe part cannot run")
    got = samples(smoke_doc, "messaging/perf-pipe")
    assert {s["param"] for s in got} == {"1", "2"}


def test_pipe_roundtrip_recorded_with_the_environment(smoke_doc):
    p = smoke_doc["env"]["pipe_roundtrip_us"]
    assert "error" not in p, p
    assert "one_cpu" in p["idle"] and all(v > 0 for v in p["idle"].values()), p
    lines = summary_lines(smoke_doc["env"])
    assert any(line.startswith("pipe_roundtrip_us: free ") for line in lines), lines


def test_pipe_roundtrip_fails_cleanly_on_a_cpu_it_cannot_use():
    r = subprocess.run([str(helper("pipe_roundtrip")), "100", "0", "100000"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "sched_setaffinity" in r.stderr, r


def test_lat_mmap_lmbench_touch(tmp_path):
    doc = Runner([registry()["lat-mmap"]], ["tmpfs"], 1, tmp_path, quick=True, quiet=True,
                 overrides={"lat-mmap": {"touch": "lmbench", "sizes": "2M"}}).execute()
    assert doc["errors"] == []
    assert [s["param"] for s in doc["samples"]] == ["2M"] and doc["samples"][0]["value"] > 0


def test_bad_parameter_value_is_reported_not_fatal(tmp_path):
    doc = Runner([registry()["lat-mmap"]], ["tmpfs"], 1, tmp_path, quick=True, quiet=True,
                 overrides={"lat-mmap": {"touch": "bogus"}}).execute()
    assert doc["samples"] == [] and "unknown touch mode" in doc["errors"][0]["message"]


def test_results_saved_and_comparable(smoke_doc, capsys):
    out = smoke_doc["_out"]
    on_disk = results.load(out)
    assert len(on_disk["samples"]) == len(smoke_doc["samples"])
    assert on_disk["env"]["kernel"] and on_disk["env"]["cpu_model"]
    assert on_disk["targets"][0]["mounts"][0]["mount"]["fstype"] == "tmpfs"
    assert cli.main(["compare", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Amean     untar" in text and "Hmean     1000" in text and "Procs     1M" in text
    assert {p.name for p in (out / "plots").glob("*.png")} == \
        {f"{n}.png" for n, w in SMOKE.items() if not all(p.needs_source for p in w.parts)}
    assert "![loopdd](plots/loopdd.png)" in (out / "report.md").read_text()


def _tiny(**kw):
    return ["--quick", "-q", "--no-plots", "--reps", "1", "--param", "loops=5",
            "--param", "counts=50"]


def test_failed_mount_and_unknown_target_reported(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEMOFS_BIN", "/bin/false")      # `false mount ... MNT` fails
    rc = cli.main(["run", "stat-missing", "--targets", "memofs,tmpfs,nosuch",
                   "--out", str(tmp_path), *_tiny()])
    assert rc == 1                       # the failed mount's status comes before the usage error's
    err = capsys.readouterr().err
    assert "unknown target kind 'nosuch'" in err
    assert err.strip().splitlines()[-1].startswith(
        "memofs-bench: FAILED (1): memofs / stat-missing: ")
    doc = results.load(tmp_path)
    assert [t["name"] for t in doc["targets"]] == ["memofs", "tmpfs"]
    assert any(e["target"] == "memofs" and "failed" in e["message"] for e in doc["errors"])
    assert {s["target"] for s in doc["samples"]} == {"tmpfs"}


def test_failed_mount_alone_fails_the_run_but_not_as_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMOFS_BIN", "/bin/false")
    assert cli.main(["run", "stat-missing", "--targets", "memofs,tmpfs",
                     "--out", str(tmp_path), *_tiny()]) == 1


def test_unknown_workload_is_usage_error(tmp_path):
    assert cli.main(["run", "nosuch", "--targets", "tmpfs", "--out", str(tmp_path)]) == 2
    assert cli.main(["run", "stat-missing", "--param", "nosuch=1", "--targets", "tmpfs",
                     "--out", str(tmp_path)]) == 2


def _fake(name, fn, requires=()):
    return Workload(name, "test", "-", [], [Metric("m", "m", "s", False)],
                    [Part("p", ("m",), fn, requires, lambda p: [""])])


def test_missing_tool_skips_part_other_targets_run(tmp_path):
    def ok(ctx):
        yield "m", "", 1.0
    doc = Runner([_fake("needs", ok, ("no-such-tool-xyz",)), _fake("plain", ok)],
                 ["tmpfs", "tmpfs:-o size=64m"], 1, tmp_path, quiet=True).execute()
    assert any("no-such-tool-xyz not installed" in e["message"] for e in doc["errors"])
    assert {(s["metric"], s["target"]) for s in doc["samples"]} == {
        ("plain/m", "tmpfs"), ("plain/m", "tmpfs:-o size=64m")}


def test_interrupt_unmounts_and_keeps_results(tmp_path):
    seen = []

    def boom(ctx):
        seen.append(ctx.mnt)
        assert mounts.mount_entry(ctx.mnt) is not None
        yield "m", "", 1.0
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Runner([_fake("boom", boom)], ["tmpfs"], 3, tmp_path, quiet=True).execute()
    assert seen and mounts.mount_entry(seen[0]) is None
    assert not Path(seen[0]).exists()
    doc = results.load(tmp_path)
    assert doc["interrupted"] is True and len(doc["samples"]) == 1


def test_coherence_on_a_host_directory_export(tmp_path):
    if not shutil.which("bindfs") or not Path("/dev/fuse").exists():
        pytest.skip("bindfs or /dev/fuse missing")
    doc = Runner([registry()["coherence"]], ["bindfs", "tmpfs"], 1, tmp_path, quick=True,
                 quiet=True).execute()
    assert doc["errors"] == []
    lat = samples(doc, "coherence/latency")
    stale = {s["param"]: s["value"] for s in samples(doc, "coherence/stale")}
    limit_ms = float(registry()["coherence"].param_values({}, True)["timeout"]) * 1000 + 100
    assert all(s["target"] == "bindfs" and 0 <= s["value"] < limit_ms for s in lat)
    # bindfs (libfuse's high-level API) caches no misses, so creates show at the next stat;
    # deletes wait out its 1 s entry timeout. Every change is either timed or stale.
    assert stale["create"] == 0.0
    for op in ("create", "delete"):
        timed = sum(1 for s in lat if s["param"] == op)
        assert timed + round(stale[op] * 5 / 100) == 5, (op, timed, stale)


@pytest.mark.parametrize("spec,tool", [("passthrough_ll", "fusermount3"), ("bindfs", "bindfs"),
                                       ("passthrough_ll:-o timeout=10", "fusermount3"),
                                       ("passthrough_hp", "fusermount3")])
def test_fuse_peer_mounts_and_unmounts(tmp_path, spec, tool):
    if not shutil.which(tool) or not Path("/dev/fuse").exists():
        pytest.skip(f"{tool} or /dev/fuse missing")
    if spec.startswith("passthrough_ll") and not shutil.which("pkg-config"):
        pytest.skip("pkg-config missing (apt-get install pkg-config libfuse3-dev)")
    t = make_target(spec, tmp_path)
    try:
        t.check()
    except ToolMissing as e:
        pytest.skip(str(e))
    with t as mnt:
        assert mounts.mount_entry(mnt)["fstype"].startswith("fuse")
        (mnt / "hello").write_text("hi")
        assert (mnt / "hello").read_text() == "hi"
        assert t.server_pids()
        server = t.server_pids()[0]
    assert mounts.mount_entry(mnt) is None
    assert not Path(f"/proc/{server}").exists() or \
        Path(f"/proc/{server}/stat").read_text().split()[2] == "Z"


def test_failed_check_sets_exit_status_1(tmp_path, monkeypatch, capsys):
    from memofs_bench.tools import CheckFailed

    def wrong(ctx):
        yield "m", "", 1.0
        raise CheckFailed("grep found 3 lines, expected 4")

    fake = _fake("wrong", wrong)
    monkeypatch.setattr(cli, "registry", lambda: {"wrong": fake})
    rc = cli.main(["run", "wrong", "-t", "tmpfs", "--out", str(tmp_path), "-q", "--no-plots",
                   "--reps", "1"])
    assert rc == 1 and capsys.readouterr().err.strip().splitlines()[-1] == (
        "memofs-bench: FAILED (1): tmpfs / wrong / p: CHECK FAILED: grep found 3 lines, expected 4")
    doc = results.load(tmp_path)
    assert doc["errors"][0]["message"] == "CHECK FAILED: grep found 3 lines, expected 4"
    assert len(doc["samples"]) == 1


def test_failed_preparation_skips_the_workload(tmp_path):
    from memofs_bench.tools import BenchError

    def ok(ctx):
        yield "m", "", 1.0

    def no_inputs(params):
        raise BenchError("download refused")

    w = _fake("needs-inputs", ok)
    w.prepare = no_inputs
    doc = Runner([w, _fake("plain", ok)], ["tmpfs"], 1, tmp_path, quiet=True).execute()
    assert [e["message"] for e in doc["errors"]] == \
        ["preparation failed, skipped: download refused"]
    assert {s["metric"] for s in doc["samples"]} == {"plain/m"}


def test_memofs_user_serves_as_the_user_and_puts_the_host_back(tmp_path):
    import os
    if os.geteuid() != 0 or not shutil.which("fusermount3") or not Path("/dev/fuse").exists():
        pytest.skip("needs root, fusermount3 and /dev/fuse")
    t = make_target("memofs-user", tmp_path)
    try:
        t.check()
    except ToolMissing as e:
        pytest.skip(str(e))
    conf = Path("/etc/fuse.conf")
    before = (Path("/dev/fuse").stat().st_mode, conf.read_bytes() if conf.exists() else None)
    with t as mnt:
        entry = mounts.mount_entry(mnt)
        assert entry["fstype"].startswith("fuse")
        assert "user_id=65534" in entry["super_options"], entry
        (mnt / "hello").write_text("hi")
        assert (mnt / "hello").read_text() == "hi"
        assert (mnt / "hello").stat().st_uid == 0, "files belong to who made them"
        server = t.server_pids()[0]
        status = Path(f"/proc/{server}/status").read_text()
        uids = next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1:]
        assert set(uids) == {"65534"}, uids
        stats = t.server_stats()
        assert stats and stats["settings"]["file_data"] == "server pages", stats
    after = (Path("/dev/fuse").stat().st_mode, conf.read_bytes() if conf.exists() else None)
    assert after == before, "/dev/fuse's mode or /etc/fuse.conf was not put back"
