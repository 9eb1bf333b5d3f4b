"""Exit status of the commands that run workloads (run, seeds, real): a target that fails to
mount or a workload that raises makes it 1, after the results and the report of what worked
are written and a one-line summary names what failed. The targets here mount nothing, so
these tests need neither root nor a FUSE server; the last one uses the real memofs binary."""

import os
from pathlib import Path

import pytest

from memofs_bench import cli, env, mounts, results, targets
from memofs_bench.tools import BenchError, ToolMissing
from memofs_bench.workloads import Metric, Part, Workload


class PlainTarget(targets.Target):
    """Its mount point stays a plain directory. `plain:refuse` fails to mount the way a
    server that rejects its options does."""

    kind, summary = "plain", "a plain directory (tests only)"

    def _mount(self, mnt: Path) -> None:
        if "refuse" in self.args:
            raise targets.TargetError("`plain mount refuse` exited 1: unknown option refuse")


@pytest.fixture(autouse=True)
def plain_target(monkeypatch):
    monkeypatch.setitem(targets.KINDS, PlainTarget.kind, PlainTarget)
    monkeypatch.setattr(mounts, "wait_mounted", lambda *a, **kw: None)
    # the environment's pipe measurement compiles and runs a C helper: not needed here
    monkeypatch.setattr(env, "pipe_roundtrip_us", lambda iters: {"error": "not measured"})


def one_sample(ctx):
    assert ctx.mnt.is_dir()
    yield "m", "", 1.0


def raising(exc: Exception):
    def run(ctx):
        yield "m", "", 2.0
        raise exc
    return run


def workload(name: str, run=one_sample) -> Workload:
    return Workload(name, "test", "-", [], [Metric("m", "m", "s", False)],
                    [Part("p", ("m",), run, (), lambda p: [""])])


def use_workloads(monkeypatch, *ws: Workload) -> None:
    monkeypatch.setattr(cli, "registry", lambda: {w.name: w for w in ws})


def run_cli(capsys, out: Path, *argv: str, reps: int = 1) -> tuple[int, str]:
    """(exit status, the last line written to stderr)."""
    rc = cli.main([*argv, "--out", str(out), "-q", "--no-plots", "--reps", str(reps)])
    err = capsys.readouterr().err.strip().splitlines()
    return rc, err[-1] if err else ""


def test_clean_run_exits_0(tmp_path, monkeypatch, capsys):
    use_workloads(monkeypatch, workload("ok"))
    rc, last = run_cli(capsys, tmp_path, "run", "ok", "-t", "plain,plain:-o x=1")
    assert rc == 0 and "FAILED" not in last
    doc = results.load(tmp_path)
    assert doc["errors"] == []
    assert [s["target"] for s in doc["samples"]] == ["plain", "plain:-o x=1"]
    assert (tmp_path / "report.md").exists()


def test_target_that_fails_to_mount_fails_the_run(tmp_path, monkeypatch, capsys):
    use_workloads(monkeypatch, workload("ok"))
    rc, last = run_cli(capsys, tmp_path, "run", "ok", "-t", "plain,plain:refuse")
    assert rc == 1
    assert last.startswith("memofs-bench: FAILED (1): plain:refuse / ok: mounting plain:refuse "
                           "failed: `plain mount refuse` exited 1: unknown option refuse")
    doc = results.load(tmp_path)
    assert [s["target"] for s in doc["samples"]] == ["plain"]     # the rest still ran
    assert "unknown option refuse" in (tmp_path / "report.md").read_text()


def test_target_that_raises_anything_while_mounting_fails_the_run(tmp_path, monkeypatch,
                                                                   capsys):
    def broken(self, mnt):
        raise KeyError("no such setting")
    monkeypatch.setattr(PlainTarget, "_mount", broken)
    use_workloads(monkeypatch, workload("ok"))
    rc, last = run_cli(capsys, tmp_path, "run", "ok", "-t", "plain")
    assert rc == 1
    assert "plain / ok: KeyError: 'no such setting' (target skipped from now on)" in last


@pytest.mark.parametrize("exc", [OSError(5, "Input/output error"), BenchError("dd failed"),
                                 ValueError("bad number"), RuntimeError("a bug"),
                                 ToolMissing("`dd` is not installed")],
                         ids=lambda e: type(e).__name__)
def test_workload_that_raises_fails_the_run(tmp_path, monkeypatch, capsys, exc):
    use_workloads(monkeypatch, workload("ok"), workload("boom", raising(exc)))
    rc, last = run_cli(capsys, tmp_path, "run", "ok", "boom", "-t", "plain")
    assert rc == 1
    assert last.startswith("memofs-bench: FAILED (1): plain / boom / p: ") and str(exc) in last
    doc = results.load(tmp_path)
    # the samples made before and beside the failure are kept and reported
    assert {(s["metric"], s["value"]) for s in doc["samples"]} == {("ok/m", 1.0), ("boom/m", 2.0)}
    assert "Problems" in (tmp_path / "report.md").read_text()


def test_failed_preparation_fails_the_run(tmp_path, monkeypatch, capsys):
    def refused(params):
        raise BenchError("download refused")

    w = workload("needs-inputs")
    w.prepare = refused
    use_workloads(monkeypatch, w)
    rc, last = run_cli(capsys, tmp_path, "run", "needs-inputs", "-t", "plain")
    assert rc == 1
    assert last.endswith("needs-inputs: preparation failed, skipped: download refused")


def test_repeated_failure_is_summarised_once_on_one_line(tmp_path, monkeypatch, capsys):
    long_why = "first line\n" + "x" * 500 + "\nthe reason at the end"
    use_workloads(monkeypatch, workload("boom", raising(OSError(long_why))))
    rc, last = run_cli(capsys, tmp_path, "run", "boom", "-t", "plain", reps=3)
    assert rc == 1
    assert last.startswith("memofs-bench: FAILED (3): plain / boom / p: OSError: first line x")
    assert last.endswith("x the reason at the end (in 3 rounds)") and " ... " in last
    assert len(last) < 300


# every command that runs targets; each takes its workloads by name from the registry
COMMANDS = {"run": ["run", "ok"], "seeds": ["seeds", "--quick"], "real": ["real", "--quick"]}


@pytest.fixture
def every_commands_workloads(monkeypatch):
    use_workloads(monkeypatch, *(workload(n) for n in ["ok", *cli.SEED_PARAMS, "real"]))


@pytest.mark.usefixtures("every_commands_workloads")
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_running_command_fails_on_a_failed_mount(tmp_path, capsys, command):
    rc, last = run_cli(capsys, tmp_path, *COMMANDS[command], "-t", "plain:refuse,plain")
    assert rc == 1 and "FAILED" in last and "plain:refuse / " in last
    assert results.load(tmp_path)["samples"], "the target that mounted was measured"


@pytest.mark.usefixtures("every_commands_workloads")
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_running_command_exits_0_when_all_runs(tmp_path, capsys, command):
    rc, last = run_cli(capsys, tmp_path, *COMMANDS[command], "-t", "plain")
    assert rc == 0 and "FAILED" not in last


def test_failure_and_usage_error_together_exit_1(tmp_path, monkeypatch, capsys):
    use_workloads(monkeypatch, workload("ok"))
    rc, last = run_cli(capsys, tmp_path, "run", "ok", "nosuch", "-t", "plain:refuse,plain")
    assert rc == 1 and "plain:refuse / ok" in last


def test_memofs_rejecting_an_option_fails_the_run(tmp_path, capsys):
    binary = targets.memofs_binary()
    if not binary or not os.access(binary, os.X_OK):
        pytest.skip("no memofs binary (cargo build --release, or set MEMOFS_BIN): "
                    "cannot check that memofs's refusal of an option fails the run")
    rc, last = run_cli(capsys, tmp_path, "run", "stat-missing", "--quick",
                       "--targets", "memofs:-o no_such_option=1")
    assert rc == 1
    assert last.startswith("memofs-bench: FAILED (1): memofs:-o no_such_option=1 / "
                           "stat-missing: mounting memofs:-o no_such_option=1 failed")
    assert "no_such_option" in last.split(" exited ", 1)[-1], last


@pytest.mark.parametrize("optional", [False, True])
def test_a_missing_tool_fails_the_run_unless_the_part_is_optional(tmp_path, monkeypatch,
                                                                  capsys, optional):
    w = workload("ok")
    w.parts.append(Part("extra", ("m",), one_sample, ("no-such-tool-here",), lambda p: [""],
                        optional=optional))
    use_workloads(monkeypatch, w)
    rc, last = run_cli(capsys, tmp_path, "run", "ok", "-t", "plain")
    assert rc == (0 if optional else 1)
    doc = results.load(tmp_path)
    assert [e["message"] for e in doc["errors"]] == [
        "skipped on every target: no-such-tool-here not installed"]
    assert [s["metric"] for s in doc["samples"]] == ["ok/m"]
