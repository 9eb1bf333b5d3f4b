"""lat-mmap (seed 002, lmbench lat_mmap): latency of mapping a file and touching it.

For each size S a C helper writes a file of S bytes on the target, then repeatedly mmaps it
(MAP_SHARED), touches it and munmaps it; it reports the mean microseconds of one
mmap-touch-munmap cycle after one untimed warm-up cycle. touch=page reads one byte of every
page; touch=lmbench writes one byte every 16 KiB of the first tenth, like lmbench's lat_mmap.
"""

from __future__ import annotations

from .. import tools
from . import Context, Metric, Param, Part, Workload, split_list


def lat(ctx: Context):
    exe = str(tools.helper("lat_mmap"))
    path = ctx.mnt / "lat_mmap.dat"
    try:
        for size in ctx.sizes("sizes"):
            label = tools.format_size(size)
            ctx.status(f"lat_mmap {label}")
            r = ctx.run([exe, str(path), str(size), str(ctx.int("iters")), ctx.params["touch"]],
                        timeout=900)
            path.unlink(missing_ok=True)
            yield "latency", label, float(r.stdout.split()[0])
    finally:
        path.unlink(missing_ok=True)


WORKLOAD = Workload(
    name="lat-mmap",
    summary="lmbench lat_mmap style: mmap + touch every page + munmap of a file on the target",
    seed="002 (mm: lat_mmap)",
    params=[
        Param("sizes", "64M,128M,256M,512M,1G,2G", "1M,4M", "file sizes (k/M/G suffixes)"),
        Param("iters", "5", "2", "timed cycles per size (after one warm-up cycle)"),
        Param("touch", "page", "page", "page: read every page; lmbench: write every 16 KiB "
              "of the first tenth (lmbench's default)"),
    ],
    metrics=[Metric("latency", "mmap-touch-munmap latency", "usecs", False, "size", "Procs")],
    parts=[Part("lat_mmap", ("latency",), lat, (),
                lambda p: [tools.format_size(tools.parse_size(s)) for s in split_list(p["sizes"])])],
)
