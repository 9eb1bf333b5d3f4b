"""atime-read (seed 000, atime cost in the server): THREADS threads pread() 4 KiB blocks, from
one shared file or one file each, for a fixed time; reads per second.

Mount the targets with `direct_io` (e.g. `memofs:-o direct_io,strictatime`) so every read is
a READ request and the server's atime rule runs on each one; compare strictatime, relatime and
noatime on the same data path.
"""

from __future__ import annotations

from .. import tools
from . import Context, Metric, Param, Part, Workload


def reads(mode: str):
    def run(ctx: Context):
        exe = str(tools.helper_threads("par_read"))
        secs = ctx.params["seconds"]
        for n in ctx.ints("threads"):
            ctx.status(f"{n} threads reading ({mode} file{'s' if mode == 'many' else ''})")
            out = ctx.run([exe, str(ctx.mnt), mode, str(n), secs]).stdout.split()
            ns, count = int(out[0]), int(out[1])
            yield f"{mode}-file", str(n), count / (ns / 1e9)
    return run


WORKLOAD = Workload(
    name="atime-read",
    summary="threads reading the same file or many files (use direct_io targets); reads/s",
    seed="000 (fs: S_NOATIME for pseudo inodes; atime kept by the server)",
    params=[
        Param("threads", "1,2,4,8,16", "1,2", "reader threads"),
        Param("seconds", "2", "0.2", "seconds per measurement"),
    ],
    metrics=[
        Metric("same-file", "4 KiB preads of one shared file", "reads/s", True, "threads", "Threads"),
        Metric("many-file", "4 KiB preads, one file per thread", "reads/s", True, "threads", "Threads"),
    ],
    parts=[
        Part("same", ("same-file",), reads("same"), (), lambda p: [x for x in p["threads"].split(",") if x]),
        Part("many", ("many-file",), reads("many"), (), lambda p: [x for x in p["threads"].split(",") if x]),
    ],
)
