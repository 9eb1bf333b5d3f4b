"""loopdd (seed 002, tmpfs/page allocator overhead): dd to a file on the target repeatedly.

write: `dd if=/dev/zero of=FILE bs=BS count=SIZE/BS conv=fdatasync`; read, after dropping
caches: `dd if=FILE of=/dev/null bs=BS`. Throughput in MiB/s from dd's own byte count and
elapsed time (its stderr, LC_ALL=C), and the elapsed seconds like the seed's second table;
for a FUSE server, the CPU time it spent per GiB moved (user plus system, all its threads).
"""

from __future__ import annotations

import re

from .. import tools
from . import Context, Metric, Param, Part, Workload, split_list

COPIED = re.compile(r"^(\d+) bytes.*copied, ([0-9.e+-]+) s", re.M)


def _dd(ctx: Context, args: list[str]) -> tuple[int, float]:
    secs, r = ctx.timed(["dd", *args])
    m = COPIED.search(r.stderr)
    if m and float(m.group(2)) > 0:
        return int(m.group(1)), float(m.group(2))
    return -1, secs   # unparsable: caller uses its own byte count and our timing


def _timed_dd(ctx: Context, args: list[str], nbytes: int):
    """dd's bytes and seconds, and the server's CPU seconds per GiB meanwhile (0 where no
    server serves the mount)."""
    cpu0 = ctx.server_cpu()
    n, secs = _dd(ctx, args)
    cpu1 = ctx.server_cpu()
    n = nbytes if n < 0 else n
    per_gib = 0.0 if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / (n / 2 ** 30)
    return n, secs, per_gib


def loop(ctx: Context):
    size = tools.parse_size(ctx.params["size"])
    path = ctx.mnt / "loopdd.img"
    for bs_text in ctx.list("bs"):
        bs = tools.parse_size(bs_text)
        count = max(1, size // bs)
        for i in range(ctx.int("loops")):
            ctx.status(f"dd write bs={bs_text} ({i + 1}/{ctx.params['loops']})")
            path.unlink(missing_ok=True)
            n, secs, cpu = _timed_dd(ctx, ["if=/dev/zero", f"of={path}", f"bs={bs}",
                                           f"count={count}", "conv=fdatasync"], count * bs)
            yield "write", bs_text, n / secs / 2 ** 20
            yield "elapsed", f"write-{bs_text}", secs
            yield "server-cpu", f"write-{bs_text}", cpu

            ctx.status(f"dd read bs={bs_text} ({i + 1}/{ctx.params['loops']})")
            ctx.drop_caches()
            n, secs, cpu = _timed_dd(ctx, [f"if={path}", "of=/dev/null", f"bs={bs}"],
                                     count * bs)
            yield "read", bs_text, n / secs / 2 ** 20
            yield "elapsed", f"read-{bs_text}", secs
            yield "server-cpu", f"read-{bs_text}", cpu
    path.unlink(missing_ok=True)


WORKLOAD = Workload(
    name="loopdd",
    summary="dd write (conv=fdatasync) and read (after drop_caches) of one file, repeated",
    seed="002 (mm: tmpfs/page allocator overhead, loopdd)",
    params=[
        Param("size", "512M", "4M", "bytes per dd (k/M/G suffixes)"),
        Param("bs", "1M,4k", "1M,4k", "block sizes"),
        Param("loops", "3", "1", "dd write+read pairs per mount"),
    ],
    metrics=[
        Metric("write", "write throughput", "MiB/s", True, "bs"),
        Metric("read", "read throughput (cold cache)", "MiB/s", True, "bs"),
        Metric("elapsed", "elapsed time", "s", False, "op-bs"),
        Metric("server-cpu", "server CPU time per GiB", "CPU-s/GiB", False, "op-bs",
               server_cost=True),
    ],
    parts=[
        Part("dd", ("write", "read", "elapsed", "server-cpu"), loop, ("dd",),
             lambda p: split_list(p["bs"]) + [f"{op}-{b}" for op in ("write", "read")
                                              for b in split_list(p["bs"])]),
    ],
)
