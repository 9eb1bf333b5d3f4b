"""The real family's logic without a mount: tree digests and manifests, subsets, the du/grep
checks, request deltas, step sequencing, the summary tables, pinned-input verification; and a
quick smoke run on tmpfs when the inputs are already in the cache."""

import io
import shutil
import subprocess
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from memofs_bench import compare, inputs, results, trees
from memofs_bench.runner import Runner
from memofs_bench.tools import BenchError, CheckFailed
from memofs_bench.workloads import real, registry

FILES = {
    "a/README": b"hello\nansible.builtin here\nand ansible.builtin again",   # no final LF
    "a/bin/run": b"#!/bin/sh\necho ansible.builtin\n",
    "a/src/x.c": b"int x;\n",
    "a/src/deep/y.bin": b"\0\x01ansible.builtin\0\n\n",
    "a/empty": b"",
}
EXEC = {"a/bin/run"}
PAT = "ansible.builtin"


def make_tar(path: Path, files=FILES, symlinks=(("a/link", "src/x.c"),), gz=True) -> Path:
    with tarfile.open(path, "w:gz" if gz else "w") as t:
        for d in sorted({str(Path(p).parent) for p in files}):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            t.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755 if name in EXEC else 0o644, 1e9
            t.addfile(info, io.BytesIO(data))
        for name, target in symlinks:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            t.addfile(info)
    return path


def extract(tar: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tar) as t:
        t.extractall(into)
    return into


def test_count_lines_counts_lines_like_grep():
    assert trees.count_lines(b"", b"x") == 0
    assert trees.count_lines(b"x\nx x\ny\nx", b"x") == 3           # last line without LF
    assert trees.count_lines(b"\0x\0\n\n", b"x") == 1


def test_count_lines_agrees_with_grep(tmp_path):
    if not shutil.which("grep"):
        pytest.skip("grep is not installed")
    root = extract(make_tar(tmp_path / "t.tgz"), tmp_path / "x")
    out = subprocess.run(["grep", "-r", "-n", "-a", "-F", PAT, "a"], cwd=root,
                         capture_output=True, text=True, env={"LC_ALL": "C"}).stdout
    assert out.count("\n") == sum(trees.count_lines(d, PAT.encode()) for d in FILES.values())


def test_repack_strips_and_digest_matches_the_extracted_tree(tmp_path):
    src = make_tar(tmp_path / "t.tgz")
    m = trees.repack(src, tmp_path / "out.tar", strip=1, patterns=[PAT])
    assert sorted(m.sizes) == sorted(p[2:] for p in FILES)
    assert m.sizes["README"] == len(FILES["a/README"]) and m.symlinks == 1
    assert m.grep == {PAT: 4}
    on_disk = trees.dir_manifest(extract(tmp_path / "out.tar", tmp_path / "x"), patterns=[PAT])
    assert on_disk.digest == m.digest and on_disk.sizes == m.sizes and on_disk.grep == m.grep
    # unstripped, checked with the top directory as prefix
    m0 = trees.repack(src, tmp_path / "out0.tar")
    d0 = trees.dir_manifest(extract(tmp_path / "out0.tar", tmp_path / "y") / "a", prefix="a/")
    assert d0.digest == m0.digest and sorted(m0.sizes) == sorted(FILES)


def test_digest_sees_content_exec_bit_and_symlink_target(tmp_path):
    root = extract(make_tar(tmp_path / "t.tgz"), tmp_path / "x")
    base = trees.dir_manifest(root).digest
    (root / "a/src/x.c").write_bytes(b"int y;\n")
    changed = trees.dir_manifest(root).digest
    (root / "a/src/x.c").write_bytes(FILES["a/src/x.c"])
    assert changed != base and trees.dir_manifest(root).digest == base
    (root / "a/src/x.c").chmod(0o755)
    assert trees.dir_manifest(root).digest != base
    (root / "a/src/x.c").chmod(0o644)
    (root / "a/link").unlink()
    (root / "a/link").symlink_to("README")
    assert trees.dir_manifest(root).digest != base
    # directories, times and excluded names do not count
    (root / "a/link").unlink()
    (root / "a/link").symlink_to("src/x.c")
    (root / "a/newdir").mkdir()
    (root / ".git").mkdir()
    (root / ".git/HEAD").write_text("x")
    assert trees.dir_manifest(root, exclude=(".git",)).digest == base


def test_check_same_names_the_differences(tmp_path):
    want = trees.repack(make_tar(tmp_path / "t.tgz"), tmp_path / "o.tar", strip=1)
    root = extract(tmp_path / "o.tar", tmp_path / "x")
    trees.check_same("untar", want, trees.dir_manifest(root))
    (root / "README").unlink()
    (root / "extra").write_text("1")
    (root / "src/x.c").write_text("longer content\n")
    with pytest.raises(CheckFailed) as e:
        trees.check_same("untar", want, trees.dir_manifest(root))
    msg = str(e.value)
    assert "missing: README (1)" in msg and "unexpected: extra (1)" in msg
    assert "wrong size: src/x.c (1)" in msg
    (root / "src/x.c").write_bytes(b"int z;\n")      # same size, other bytes
    (root / "README").write_bytes(FILES["a/README"])
    (root / "extra").unlink()
    with pytest.raises(CheckFailed, match="content differs"):
        trees.check_same("untar", want, trees.dir_manifest(root))


def test_subset_cutoff_keeps_the_same_range_of_both_releases(tmp_path):
    assert trees.subset_cutoff(["b", "a", "c"], 0) is None
    assert trees.subset_cutoff(["b", "a", "c"], 3) is None
    assert trees.subset_cutoff(["b", "a", "c"], 2) == "b"
    src = make_tar(tmp_path / "t.tgz")
    full = trees.repack(src, tmp_path / "full.tar", strip=1, patterns=[PAT])
    cut = trees.subset_cutoff(full.sizes, 2)
    sub = trees.repack(tmp_path / "full.tar", tmp_path / "sub.tar", cutoff=cut, patterns=[PAT])
    assert sorted(sub.sizes) == sorted(full.sizes)[:2] == ["README", "bin/run"]
    assert sub.grep == {PAT: 3}
    on_disk = trees.dir_manifest(extract(tmp_path / "sub.tar", tmp_path / "x"))
    assert on_disk.digest == sub.digest


def test_pack_dir_keeps_listed_top_level_names(tmp_path):
    root = extract(make_tar(tmp_path / "t.tgz"), tmp_path / "x") / "a"
    m = trees.pack_dir(root, tmp_path / "p.tar", "py", keep=lambda top: top in ("src", "README"))
    assert sorted(m.sizes) == ["py/README", "py/src/deep/y.bin", "py/src/x.c"]
    with tarfile.open(tmp_path / "p.tar") as t:
        assert all(i.uid == 0 and i.uname == "root" for i in t.getmembers())
    back = extract(tmp_path / "p.tar", tmp_path / "y")
    assert trees.dir_manifest(back / "py", prefix="py/").digest == m.digest


def test_manifest_round_trips(tmp_path):
    m = trees.Manifest("d" * 64, {"a": 1, "b/c": 2}, 1, 3, {PAT: 5}, "t" * 40)
    m.save(tmp_path / "m.json")
    back = trees.Manifest.load(tmp_path / "m.json")
    assert back == m and back.files == 2 and back.bytes == 3


def test_du_parse_and_check():
    out = "5\tr/a\n7\tr/d/b\n4096\tr/d\n8192\tr\n"
    du = trees.parse_du(out, "r")
    assert du == {"a": 5, "d/b": 7, "d": 4096, "": 8192}
    want = trees.Manifest("", {"r/a": 5, "r/d/b": 7})
    trees.check_du(du, want, under="r/")
    with pytest.raises(CheckFailed, match="1 of 2 files"):
        trees.check_du(du, trees.Manifest("", {"r/a": 5, "r/d/b": 8}), under="r/")
    with pytest.raises(CheckFailed, match="r/c"):
        trees.check_du(du, trees.Manifest("", {"r/c": 1}), under="r/")


def test_requests_by_op():
    before = {"requests": {"LOOKUP": {"count": 10, "p50_ns": 1}, "OPEN": {"count": 2}}}
    after = {"requests": {"LOOKUP": {"count": 15}, "OPEN": {"count": 2}, "CREATE": {"count": 3}},
             "events": {"x": 1}}
    assert real.requests_by_op(before, after) == {"CREATE": 3, "LOOKUP": 5}
    assert real.requests_by_op({}, after) == {"CREATE": 3, "LOOKUP": 15, "OPEN": 2}
    assert real.requests_by_op({}, {}) == {}


class FakeCtx:
    """Records what run_steps does; commands 'run' instantly with a scripted stdout."""

    def __init__(self, stats=True, out="ok"):
        self.mnt, self.events, self.out, self.n = Path("/mnt"), [], out, 0
        self.with_stats = stats

    def drop_caches(self):
        self.events.append("drop")

    def status(self, s):
        pass

    def stats(self):
        self.events.append("stats")
        self.n += 7
        return {"requests": {"LOOKUP": {"count": self.n}}} if self.with_stats else None

    def timed(self, cmd, cwd, env_update):
        self.events.append(("cmd", cmd[0], str(cwd)))
        return 0.5, SimpleNamespace(stdout=self.out)


def test_run_steps_order_drop_stats_and_detail():
    ctx = FakeCtx()
    seen = []
    steps = [real.Step("one", [["a"], ["b"]], cwd="d", pre=lambda: ctx.events.append("pre"),
                       check=lambda out: seen.append(out)),
             real.Step("two", [["c"]], cold=True)]
    got = list(real.run_steps(ctx, steps))
    assert ctx.events == ["pre", "stats", ("cmd", "a", "/mnt/d"), ("cmd", "b", "/mnt/d"),
                          "stats", "drop", "stats", ("cmd", "c", "/mnt"), "stats"]
    assert seen == ["ok"]
    assert got == [("time", "one", 1.0), ("requests", "one", 7.0, {"ops": {"LOOKUP": 7}}),
                   ("time", "two", 0.5), ("requests", "two", 7.0, {"ops": {"LOOKUP": 7}})]


def test_run_steps_without_server_counters_yields_times_only():
    ctx = FakeCtx(stats=False)
    got = list(real.run_steps(ctx, [real.Step("one", [["a"]])]))
    assert got == [("time", "one", 0.5)] and ctx.events.count("stats") == 1


def test_failed_check_stops_without_a_sample():
    ctx = FakeCtx(out="wrong")

    def check(out):
        raise CheckFailed(f"got {out}")

    gen = real.run_steps(ctx, [real.Step("one", [["a"]], check=check), real.Step("two", [["b"]])])
    with pytest.raises(CheckFailed, match="got wrong"):
        list(gen)
    assert ("cmd", "b", "/mnt") not in ctx.events


def fake_inputs():
    t = real.Tree(Path("/x.tar"), trees.Manifest("", {"r/a": 1}, grep={real.GREP: 1}), "r")
    return real.Inputs(t, t, t, t, t)


@pytest.mark.parametrize("quick", [False, True])
def test_plan_matches_declared_labels(quick):
    params = registry()["real"].param_values({}, quick)
    steps = real.plan(Path("/mnt"), params, fake_inputs())
    assert [s.label for s in steps] == real.LABELS == registry()["real"].parts[0].labels(params)
    assert [s.label for s in steps if s.cold] == [x for x in real.LABELS if x.endswith("-cold")]
    assert all(s.check for s in steps if s.label != "git-add")
    make = next(s for s in steps if s.label == "make")
    assert make.cmds[0][:2] == ["make", "-j2"] and ("host/minilua" in make.cmds[0]) == quick


@pytest.mark.parametrize("label,good,bad,match", [
    ("find", "r/a\n", "r/a\nr/b\n", "find listed 2 files, expected 1"),
    ("grep", "r/a:1:ansible.builtin\n", "", "matching lines"),
    ("du", "1\tr/a\n4096\tr\n", "2\tr/a\n", "1 of 1 files"),
    ("git-status", "", " M x\n", "clean tree"),
    ("py-import", "imported 12\n", "Traceback ...", "printed"),
])
def test_plan_checks_reject_wrong_answers(label, good, bad, match):
    params = registry()["real"].param_values({}, False)
    step = next(s for s in real.plan(Path("/mnt"), params, fake_inputs()) if s.label == label)
    step.check(good)
    with pytest.raises(CheckFailed, match=match):
        step.check(bad)


def combined():
    metrics = registry()["real"].metric_docs({})
    samples = []
    for rnd, (t, r) in enumerate([(1.0, 100), (2.0, 300), (3.0, 200)]):
        samples += [{"metric": "real/time", "target": "tmpfs", "param": "untar", "value": 0.5,
                     "round": rnd},
                    {"metric": "real/time", "target": "memofs", "param": "untar", "value": t,
                     "round": rnd},
                    {"metric": "real/requests", "target": "memofs", "param": "untar",
                     "value": float(r), "round": rnd,
                     "detail": {"ops": {"CREATE": r // 2, "LOOKUP": r // 4, "WRITE": r // 4}}}]
    return results.Combined(targets=["tmpfs", "memofs"], metrics=metrics, samples=samples)


def test_summary_tables():
    c = combined()
    text = compare.summary_table(c, "real/time")
    assert "| step | tmpfs | memofs |" in text
    assert "| untar | 0.500 | 2.000 (4.00x) |" in text
    req = compare.summary_table(c, "real/requests")
    assert "| step | memofs |" in req and "| untar | 200 |" in req and "x)" not in req
    ops = compare.ops_table(c, "real/requests", top=2)
    assert "| untar | CREATE 100, LOOKUP 50, +1 more |" in ops
    assert compare.ops_table(c, "real/time") is None
    assert len(compare.summaries(c)) == 3 and compare.summaries(c, "tree") == []
    assert "(4.00x)" in compare.render(c)


def test_fetch_verifies_the_cached_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMOFS_BENCH_INPUTS", str(tmp_path))
    (tmp_path / "downloads").mkdir()
    f = tmp_path / "downloads" / "x-1.tar.gz"
    f.write_bytes(b"release")
    good = inputs.Pinned("sdist", "x", "1", f.name, inputs.sha256_file(f))
    assert inputs.fetch(good) == f                      # cached and verified: no download
    bad = inputs.Pinned("sdist", "x", "1", f.name, "0" * 64)
    with pytest.raises(BenchError, match="is not the pinned"):
        inputs.fetch(bad)


def test_pins_are_exact():
    pins = [inputs.ANSIBLE, inputs.DJANGO_A, inputs.DJANGO_B, inputs.LUAJIT, *inputs.WHEELS]
    for p in pins:
        assert len(p.sha256) == 64 and int(p.sha256, 16) >= 0
        assert p.version and p.version in p.filename


def _inputs_cached() -> bool:
    d = inputs.inputs_dir() / "downloads"
    pins = [inputs.ANSIBLE, inputs.DJANGO_A, inputs.DJANGO_B, inputs.LUAJIT, *inputs.WHEELS]
    return all((d / p.filename).is_file() for p in pins)


@pytest.mark.smoke
def test_real_quick_on_tmpfs(tmp_path):
    if not _inputs_cached():
        pytest.skip(f"the real family's inputs are not in {inputs.inputs_dir()} "
                    "(bench/memofs-bench fetch real downloads them; tests never do)")
    missing = [t for t in ("git", "make", "gcc") if not shutil.which(t)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")
    doc = Runner([registry()["real"]], ["tmpfs"], 1, tmp_path, quick=True, quiet=True).execute()
    assert doc["errors"] == []
    got = [s["param"] for s in doc["samples"] if s["metric"] == "real/time"]
    assert got == real.LABELS and all(s["value"] > 0 for s in doc["samples"])
