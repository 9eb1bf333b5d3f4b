"""guest: everyday work in a virtio-fs guest (QEMU TCG, one vCPU), on the vm-* targets only:
memofs's two backends against virtiofsd with the same `--cache`, and the guest's own tmpfs.

Each round boots a guest per target (kernel KERNEL of scripts/vm/kernels.tsv) with its
inputs in its initramfs, in guest memory, and runs, each step timed from the host (a serial
round trip of a few milliseconds included, the same for every target):
- `write-1M`, `read-1M`: dd of DD_SIZE in 1 MiB blocks (`conv=fsync`), read back after the
  guest dropped its caches; `write-4k`, `read-4k`: the same in 4 KiB blocks, SMALL_SIZE;
- `untar` of the first TREE_FILES files of Ansible's sdist (a real source tree) with
  busybox tar; after the guest dropped its caches `find`, `ls -lR`, `du -s`; after dropping
  them again `grep -r` (`grep-cold`), then `grep` warm; `rm -rf` of the tree;
- `lookups`: seed 001's loop in the guest's shell, LOOKUPS `[ -e ]` of a missing name (one
  stat(2) each, no process), after drop_caches; `stat-procs`: STATS `stat` processes on it.

Checked: every file's size after dd, dd's data read back equal to what was written, the
files find lists, grep's count of matching lines, the tree gone after rm. With memofs (its
`stats` on the device's socket), each step also gives the requests it caused; with any
server, the CPU time its processes spent in the step (what TCG's own pace leaves out).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import inputs, tools
from ..tools import CheckFailed
from ..vm import GuestSetup, kernel
from . import Context, Metric, Param, Part, Workload
from .real import GREP, Tree, _tree, requests_by_op

TAR = "/inputs/tree.tar"
DROP = "sync; echo 3 >/proc/sys/vm/drop_caches"
LABELS = ["write-1M", "read-1M", "write-4k", "read-4k", "untar", "find", "ls-lR", "du",
          "grep-cold", "grep", "rm", "lookups", "stat-procs"]


def tree(params: dict) -> Tree:
    t = _tree(inputs.ANSIBLE, 0, int(params["tree_files"]), patterns=[GREP])
    t.root = f"{inputs.ANSIBLE.name}-{inputs.ANSIBLE.version}"
    return t


def setup(params: dict) -> GuestSetup:
    return GuestSetup(params["kernel"], {TAR: tree(params).tar}, int(params["memory"]))


def prepare(params: dict) -> None:
    tree(params)
    kernel(params["kernel"])


@dataclass
class Step:
    """A timed guest script; `cold` drops the guest's caches first, `check` (untimed) is a
    script that must succeed afterwards, `want` the timed script's expected output."""
    label: str
    script: str
    cold: bool = False
    check: str = ""
    want: str | None = None


def plan(params: dict, t: Tree) -> list[Step]:
    big, small = (tools.parse_size(params[k]) for k in ("dd_size", "small_size"))
    root = f"/mnt/{t.root}"

    def dd(name: str, bs: int, size: int) -> tuple[Step, Step]:
        n = size // bs
        write = Step(f"write-{name}",
                     f"dd if=/dev/zero of=/mnt/{name} bs={bs} count={n} conv=fsync 2>/dev/null",
                     check=f'[ "$(stat -c %s /mnt/{name})" = {n * bs} ]')
        read = Step(f"read-{name}", f"dd if=/mnt/{name} of=/dev/null bs={bs} 2>/dev/null",
                    cold=True, check=f"cmp -n {n * bs} /mnt/{name} /dev/zero && rm /mnt/{name}")
        return write, read

    loop = "i=0; while [ $i -lt {n} ]; do {cmd}; i=$((i + 1)); done"
    return [
        *dd("1M", 1 << 20, big), *dd("4k", 4096, small),
        Step("untar", f"tar -xf {TAR} -C /mnt",
             check=f'[ "$(find {root} -type f | wc -l)" = {t.manifest.files} ]'),
        Step("find", f"find {root} -type f | wc -l", cold=True, want=str(t.manifest.files)),
        Step("ls-lR", f"ls -lR {root} >/dev/null"),
        Step("du", f"du -s {root} >/dev/null"),
        Step("grep-cold", f"grep -r -F {GREP} {root} | wc -l", cold=True,
             want=str(t.manifest.grep[GREP])),
        Step("grep", f"grep -r -F {GREP} {root} | wc -l", want=str(t.manifest.grep[GREP])),
        Step("rm", f"rm -rf {root}", check=f"[ ! -e {root} ]"),
        Step("lookups", loop.format(n=int(params["lookups"]), cmd="[ -e /mnt/missing ]"),
             cold=True),
        Step("stat-procs", loop.format(n=int(params["stats"]),
                                       cmd="stat /mnt/missing >/dev/null 2>&1")),
    ]


def steps(ctx: Context):
    guest = ctx.guest
    if guest is None:
        raise CheckFailed("the guest workload ran without a guest")
    t = tree(ctx.params)
    for s in plan(ctx.params, t):
        if s.cold:
            guest.check(DROP, "dropping the guest's caches")
        ctx.status(s.label)
        before, cpu0 = ctx.stats(), ctx.server_cpu()
        rc, out, secs = guest.run(s.script)
        cpu1 = ctx.server_cpu()
        after = ctx.stats() if before is not None else None
        if rc != 0:
            raise CheckFailed(f"{s.label}: exit {rc} in the guest: {out.strip()[-300:]}")
        if s.want is not None and out.strip() != s.want:
            raise CheckFailed(f"{s.label}: the guest printed {out.strip()[-100:]!r}, "
                              f"expected {s.want}")
        if s.check:
            rc, out, _ = guest.run(s.check)
            if rc != 0:
                raise CheckFailed(f"{s.label}: the check `{s.check}` failed in the guest: "
                                  f"{out.strip()[-300:]}")
        yield "time", s.label, secs
        if cpu0 is not None and cpu1 is not None:
            yield "server-cpu", s.label, cpu1 - cpu0
        if before is not None and after is not None:
            ops = requests_by_op(before, after)
            total = sum(ops.values())
            detail = {"ops": ops}
            if s.label == "untar":
                detail["per_file"] = round(total / t.manifest.files, 2)
            yield "requests", s.label, float(total), detail


WORKLOAD = Workload(
    name="guest",
    summary="everyday work in a virtio-fs guest (TCG): dd 1 MiB and 4 KiB, untar/find/ls -lR/"
            "du/grep/rm of a real tree, seed 001's lookups; memofs against virtiofsd",
    seed="001 (its lookups, in the guest it was measured in)",
    params=[
        Param("kernel", "7.3", "7.3", "guest kernel: an id of scripts/vm/kernels.tsv"),
        Param("memory", "2048", "1024", "guest memory, MiB"),
        Param("dd_size", "128M", "4M", "bytes dd writes and reads in 1 MiB blocks"),
        Param("small_size", "16M", "256K", "bytes dd writes and reads in 4 KiB blocks"),
        Param("tree_files", "5000", "400", "files of the Ansible tree untarred"),
        Param("lookups", "10000", "100", "lookups of a missing name in the shell"),
        Param("stats", "1000", "10", "stat processes on a missing name"),
    ],
    metrics=[Metric("time", "step time in the guest", "s", False, "step", summary=True),
             Metric("requests", "FUSE requests per step (memofs stats)", "requests", False,
                    "step", summary=True),
             Metric("server-cpu", "server CPU time per step (user plus system, every "
                    "process of the server)", "CPU-s", False, "step", summary=True,
                    server_cost=True)],
    parts=[Part("guest", ("time", "requests", "server-cpu"), steps,
                ("qemu-system-x86_64", "busybox", "cpio"), lambda p: list(LABELS))],
    prepare=prepare,
    guest=setup,
)
