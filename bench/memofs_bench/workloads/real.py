"""real: real programs on real trees, each step timed on its own and its result checked.

Inputs (pinned releases, fetched once into the inputs cache and verified, see inputs.py):
- Ansible's sdist (44 722 files, 308 MB; by default its first 12 000 files by path): untar;
  find, du, grep -r warm and after drop_caches; rm -rf.
- Two Django releases (by default the first 4 000 files of each): a git history (init, add, commit; the second release committed over
  the first), git status warm and cold, checkout of the first revision.
- LuaJIT's sources: make -j2 on the target; the interpreter built must run.
- numpy, pandas, scipy (pip-installed once into the cache, byte-compiled): untar of the
  installed set onto the target, then imports from it in a fresh interpreter (`python -S`,
  only the target's set on the path), warm and after drop_caches.

Every check compares with what the inputs hold (the tree digest after untar and checkout, the
files and sizes find and du list, grep's count of matching lines, git's tree ids, the build's
output, the imported modules' files); a wrong answer raises CheckFailed. With a server that
reports counters (memofs), each step also gives the FUSE requests it caused (from
`memofs stats --json` before and after; the second query's own stat of the mount point may
add one GETATTR).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from .. import inputs, trees
from ..tools import CheckFailed, run
from . import Context, Metric, Param, Part, Workload

GREP = "ansible.builtin"        # 36 463 matching lines in the whole Ansible tree
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z"}
GIT = ["git", "-c", "user.name=memofs-bench", "-c", "user.email=bench@memofs.invalid",
       "-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "core.fsmonitor=false",
       "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", "-c", "safe.directory=*"]
MAKE_ENV = {"MAKEFLAGS": None, "MFLAGS": None, "MAKELEVEL": None}
IMPORT = ("import importlib, sys\n"
          "root = sys.argv[1]\n"
          "sys.path.insert(0, root)\n"
          "for name in sys.argv[2].split(','):\n"
          "    m = importlib.import_module(name)\n"
          "    if not (m.__file__ or '').startswith(root + '/'):\n"
          "        sys.exit(f'{name} came from {m.__file__}, not {root}')\n"
          "print('imported', len(sys.modules))\n")

# -- inputs -------------------------------------------------------------------------------


@dataclass
class Tree:
    tar: Path
    manifest: trees.Manifest
    root: str = ""           # the top directory the tarball extracts, if it has one


@dataclass
class Inputs:
    big: Tree
    git_a: Tree
    git_b: Tree
    build: Tree
    py: Tree


def _derived(name: str, make: Callable[[Path], trees.Manifest]) -> tuple[Path, trees.Manifest]:
    d = inputs.inputs_dir() / "trees"
    d.mkdir(parents=True, exist_ok=True)
    tar, man = d / f"{name}.tar", d / f"{name}.json"
    if tar.exists() and man.exists():
        return tar, trees.Manifest.load(man)
    m = make(tar)
    m.save(man)
    return tar, m


def _git_tree(tar: Path) -> str:
    """`git write-tree` of the tarball's content, in a scratch folder off the targets."""
    with tempfile.TemporaryDirectory(prefix="memofs-bench-git-") as tmp:
        run(["tar", "--no-same-owner", "-xf", str(tar)], cwd=tmp)
        for cmd in (["init", "-q"], ["add", "-A", "-f"]):
            run(GIT + cmd, cwd=tmp, env_update=GIT_ENV)
        return run(GIT + ["write-tree"], cwd=tmp, env_update=GIT_ENV).stdout.strip()


def _tree(pin: inputs.Pinned, strip: int, limit: int = 0, git: bool = False,
          patterns=(), cutoff_from: trees.Manifest | None = None, log=lambda s: None) -> Tree:
    """The pinned archive repacked (first `strip` path components dropped) as a cached tarball;
    with `limit`, only the `limit` smallest paths (of `cutoff_from`'s files, if given)."""
    def make(src: Path, cutoff: str | None, s: int) -> Callable[[Path], trees.Manifest]:
        def inner(tar: Path) -> trees.Manifest:
            m = trees.repack(src, tar, s, cutoff, patterns)
            if git:
                m.git_tree = _git_tree(tar)
            return m
        return inner

    base = f"{pin.name}-{pin.version}-f{trees.FORMAT}"
    tar, m = _derived(base, make(inputs.fetch(pin, log), None, strip))
    cutoff = trees.subset_cutoff((cutoff_from or m).sizes, limit)
    if cutoff is None:
        return Tree(tar, m)
    return Tree(*_derived(f"{base}-n{limit}", make(tar, cutoff, 0)))


_loaded: dict[tuple, Inputs] = {}


def load(params: dict, log=lambda s: None) -> Inputs:
    """The inputs for `params`: fetched, verified and repacked into the cache on first use."""
    key = (trees.FORMAT, params["tree_files"], params["git_files"], params["py_packages"])
    if key in _loaded:
        return _loaded[key]
    log("preparing the Ansible tree")
    big = _tree(inputs.ANSIBLE, 0, int(params["tree_files"]), patterns=[GREP], log=log)
    big.root = f"{inputs.ANSIBLE.name}-{inputs.ANSIBLE.version}"
    log("preparing the Django trees")
    limit = int(params["git_files"])
    git_a = _tree(inputs.DJANGO_A, 1, limit, git=True, log=log)
    full_a = _tree(inputs.DJANGO_A, 1, git=True, log=log)
    git_b = _tree(inputs.DJANGO_B, 1, limit, git=True, cutoff_from=full_a.manifest, log=log)
    log("preparing the LuaJIT sources")
    build = _tree(inputs.LUAJIT, 1, log=log)
    log("preparing the Python package set")
    stage = inputs.python_set(log)
    pkgs = sorted(p for p in params["py_packages"].split(",") if p and p != "all")
    keep = (lambda top: top in pkgs) if pkgs else (lambda top: not top.startswith("."))
    tar, m = _derived(f"pyset-f{trees.FORMAT}-{'+'.join(pkgs) or 'all'}",
                      lambda t: trees.pack_dir(stage, t, "py", keep))
    out = Inputs(big, git_a, git_b, build, Tree(tar, m, "py"))
    _loaded[key] = out
    return out


def prepare(params: dict) -> None:
    load(params, log=lambda s: print(f"real: {s}", file=sys.stderr, flush=True))


# -- steps --------------------------------------------------------------------------------


@dataclass
class Step:
    """One timed step: `cmds` run one after the other in `cwd` (relative to the mount);
    `pre` (untimed) runs first, caches are dropped before a `cold` step, and `check` gets the
    last command's stdout and raises CheckFailed on a wrong result."""
    label: str
    cmds: list[list[str]]
    cwd: str = "."
    cold: bool = False
    pre: Callable[[], None] | None = None
    check: Callable[[str], None] | None = None
    env: dict[str, str | None] = field(default_factory=dict)


def requests_by_op(before: dict, after: dict) -> dict[str, int]:
    """Requests per opcode between two `memofs stats --json` documents (zeros left out)."""
    def counts(doc: dict) -> dict[str, int]:
        return {op: int(v.get("count", 0)) for op, v in (doc.get("requests") or {}).items()}
    b, a = counts(before), counts(after)
    return {op: a[op] - b.get(op, 0) for op in sorted(a) if a[op] - b.get(op, 0)}


def run_steps(ctx: Context, steps: list[Step]) -> Iterator[tuple]:
    """Run steps in order; yields (time) and, where the server reports counters, (requests,
    with the per-opcode counts as detail). A failed check ends the sequence."""
    for s in steps:
        if s.pre:
            s.pre()
        if s.cold:
            ctx.drop_caches()
        ctx.status(s.label)
        before = ctx.stats()
        secs, out = 0.0, ""
        for cmd in s.cmds:
            t, r = ctx.timed(cmd, cwd=ctx.mnt / s.cwd, env_update=s.env)
            secs, out = secs + t, r.stdout
        after = ctx.stats() if before is not None else None
        if s.check:
            s.check(out)
        yield "time", s.label, secs
        if before is not None and after is not None:
            ops = requests_by_op(before, after)
            yield "requests", s.label, float(sum(ops.values())), {"ops": ops}


def _expect(what: str, got, want) -> None:
    if got != want:
        raise CheckFailed(f"{what}: got {got!r}, expected {want!r}")


def _tree_check(what: str, mnt: Path, tree: Tree, where: str, exclude=()) -> Callable:
    def check(_out: str = "") -> None:
        prefix = f"{tree.root}/" if tree.root and where == tree.root else ""
        trees.check_same(what, tree.manifest, trees.dir_manifest(mnt / where, exclude, (),
                                                                 prefix))
    return check


def _untar(mnt: Path, tree: Tree, into: str) -> Callable[[], None]:
    def pre() -> None:
        (mnt / into).mkdir(exist_ok=True)
        run(["tar", "--no-same-owner", "-xf", str(tree.tar)], cwd=mnt / into)
        _tree_check(f"untar into {into}", mnt, tree, into, exclude=(".git",))()
    return pre


def _remove(path: Path) -> None:
    """Untimed cleanup of an earlier phase's tree, so that servers holding a descriptor per
    inode the kernel knows (memofs-pt, passthrough_ll) only hold the current phase's."""
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        raise CheckFailed(f"cannot remove {path.name} from the target")


def _replace_worktree(mnt: Path, tree: Tree, repo: str) -> Callable[[], None]:
    def pre() -> None:
        for entry in os.scandir(mnt / repo):
            if entry.name != ".git":
                shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) \
                    else os.unlink(entry.path)
        _untar(mnt, tree, repo)()
    return pre


def plan(mnt: Path, params: dict, inp: Inputs) -> list[Step]:
    big, root = inp.big, inp.big.root
    names = sorted(big.manifest.sizes)
    want_grep = big.manifest.grep[GREP]

    def find_check(out: str) -> None:
        got = sorted(out.splitlines())
        if got != names:
            missing = sorted(set(names) - set(got))[:3]
            raise CheckFailed(f"find listed {len(got)} files, expected {len(names)}"
                              f"{' (missing ' + ', '.join(missing) + ')' if missing else ''}")

    def du_check(out: str) -> None:
        trees.check_du(trees.parse_du(out, root), big.manifest, under=f"{root}/")

    def grep_check(out: str) -> None:
        _expect(f"grep -r {GREP}: matching lines", out.count("\n"), want_grep)

    def gone(out: str) -> None:
        if (mnt / root).exists() or os.path.lexists(mnt / root):
            raise CheckFailed(f"rm -rf left {root} behind")

    def git_tree(tree: Tree) -> Callable[[str], None]:
        def check(_out: str) -> None:
            got = run(GIT + ["rev-parse", "HEAD^{tree}"], cwd=mnt / "repo",
                      env_update=GIT_ENV).stdout.strip()
            _expect("git tree of HEAD", got, tree.manifest.git_tree)
        return check

    def clean(out: str) -> None:
        if out.strip():
            raise CheckFailed(f"git status reports changes in a clean tree: "
                              f"{out.strip().splitlines()[:3]}")

    def checked_out(out: str) -> None:
        _tree_check("git checkout", mnt, inp.git_a, "repo", exclude=(".git",))()
        clean(run(GIT + ["status", "--porcelain"], cwd=mnt / "repo", env_update=GIT_ENV).stdout)

    quick_build = params["build"] == "minilua"
    src = "luajit/luajit2/src"

    def build_pre() -> None:
        _remove(mnt / "repo")
        _untar(mnt, inp.build, "luajit")()
        (mnt / "luajit" / "check.lua").write_text("io.write('LuaJIT ', 6 * 7, '\\n')\n")

    def built(_out: str) -> None:
        exe = [str(mnt / src / "host" / "minilua"), str(mnt / "luajit" / "check.lua")] \
            if quick_build else [str(mnt / src / "luajit"), str(mnt / "luajit" / "check.lua")]
        r = run(exe, check=False)
        _expect(f"exit status and output of the built {Path(exe[0]).name} "
                f"(stderr {r.stderr.strip()[-200:]!r})", (r.returncode, r.stdout.strip()),
                (0, "LuaJIT 42"))

    mods = params["py_import"]
    py = [sys.executable, "-S", "-E", "-c", IMPORT, str(mnt / "py"), mods]

    def imported(out: str) -> None:
        if not out.startswith("imported "):
            raise CheckFailed(f"importing {mods} printed {out.strip()[:200]!r}")

    tar = ["tar", "--no-same-owner", "-xf"]
    jobs = f"-j{params['jobs']}"
    # BUILDMODE=static: one object per source (the default mixed mode compiles each twice)
    make = ["make", jobs, "-C", src, "host/minilua"] if quick_build else \
        ["make", jobs, "-C", "luajit/luajit2", "BUILDMODE=static"]
    return [
        Step("untar", [tar + [str(big.tar)]], check=_tree_check("untar", mnt, big, root)),
        Step("find", [["find", root, "-type", "f"]], check=find_check),
        Step("du", [["du", "-a", "-b", root]], check=du_check),
        Step("grep", [["grep", "-r", "-n", "-a", "-F", GREP, root]], check=grep_check),
        Step("find-cold", [["find", root, "-type", "f"]], cold=True, check=find_check),
        Step("du-cold", [["du", "-a", "-b", root]], cold=True, check=du_check),
        Step("grep-cold", [["grep", "-r", "-n", "-a", "-F", GREP, root]], cold=True,
             check=grep_check),
        Step("rm", [["rm", "-rf", root]], check=gone),
        Step("git-add", [GIT + ["init", "-q"], GIT + ["add", "-A", "-f"]], cwd="repo",
             pre=_untar(mnt, inp.git_a, "repo"), env=GIT_ENV),
        Step("git-commit", [GIT + ["commit", "-q", "-m", "A"]], cwd="repo", env=GIT_ENV,
             check=git_tree(inp.git_a)),
        Step("git-commit2", [GIT + ["add", "-A", "-f"], GIT + ["commit", "-q", "-m", "B"]],
             cwd="repo", pre=_replace_worktree(mnt, inp.git_b, "repo"), env=GIT_ENV,
             check=git_tree(inp.git_b)),
        # The first status after a commit asks once for every directory's .gitignore (names
        # no one looked up yet); the next one is the warm status people repeat.
        Step("git-status-first", [GIT + ["status", "--porcelain"]], cwd="repo", env=GIT_ENV,
             check=clean),
        Step("git-status", [GIT + ["status", "--porcelain"]], cwd="repo", env=GIT_ENV,
             check=clean),
        Step("git-status-cold", [GIT + ["status", "--porcelain"]], cwd="repo", env=GIT_ENV,
             cold=True, check=clean),
        Step("git-checkout", [GIT + ["checkout", "-q", "--detach", "HEAD~1"]], cwd="repo",
             env=GIT_ENV, check=checked_out),
        Step("make", [make], pre=build_pre, env=MAKE_ENV, check=built),
        Step("py-untar", [tar + [str(inp.py.tar)]], pre=lambda: _remove(mnt / "luajit"),
             check=_tree_check("untar", mnt, inp.py, "py")),
        Step("py-import", [py], check=imported),
        Step("py-import-cold", [py], cold=True, check=imported),
    ]


LABELS = ["untar", "find", "du", "grep", "find-cold", "du-cold", "grep-cold", "rm", "git-add",
          "git-commit", "git-commit2", "git-status-first", "git-status", "git-status-cold",
          "git-checkout", "make", "py-untar", "py-import", "py-import-cold"]


def steps(ctx: Context):
    inp = load(ctx.params)
    yield from run_steps(ctx, plan(ctx.mnt, ctx.params, inp))


WORKLOAD = Workload(
    name="real",
    summary="real programs on real trees: untar/find/du/grep/rm of Ansible, git on two Django "
            "releases, make -j2 of LuaJIT, imports of numpy/pandas/scipy",
    seed="(none: everyday work on real trees)",
    params=[
        Param("tree_files", "12000", "400", "files of the Ansible tree kept (0: all 44 722)"),
        Param("git_files", "4000", "300", "files of each Django release kept (0: all 6 834 "
                                          "and 6 918)"),
        Param("build", "luajit", "minilua", "luajit: the whole LuaJIT build; minilua: its "
                                            "first host tool only"),
        Param("jobs", "2", "2", "make -j"),
        Param("py_packages", "all", "dateutil,pytz", "top-level names of the Python set "
                                                     "put on the target (all: every one)"),
        Param("py_import", "numpy,pandas,scipy.stats,scipy.optimize,scipy.sparse,scipy.signal",
              "dateutil.parser,pytz", "modules imported from the target"),
    ],
    metrics=[Metric("time", "step time", "s", False, "step", summary=True),
             Metric("requests", "FUSE requests per step (memofs stats)", "requests", False,
                    "step", summary=True)],
    parts=[Part("real", ("time", "requests"), steps,
                ("tar", "find", "du", "grep", "rm", "git", "make", "gcc"),
                lambda p: list(LABELS))],
    prepare=prepare,
)
