"""bigfile (seed 002, the data path): real programs moving large files, cold and warm.

A file of SIZE bytes (incompressible, made once per round outside the mount) is copied in
with `cp`, then read after `drop_caches` by `cat`, `sha256sum`, Python's `read()` of the
whole file, `tar` (which reads in 10 KiB records) and `dd bs=4k`, and read again warm by
`cat`; seconds per step. The steps show what a per-open data path choice (`-o direct_io=`)
costs each kind of reader: large requests, small ones, and a second read.
"""

from __future__ import annotations

import os
import tempfile

from .. import tools
from . import Context, Metric, Param, Part, Workload

STEPS = ["cp-in", "cat-cold", "sha256sum-cold", "python-read-cold", "tar-cold", "dd-4k-cold",
         "cat-warm"]


def _source(size: int) -> str:
    fd, path = tempfile.mkstemp(prefix="memofs-bench-bigfile-")
    with os.fdopen(fd, "wb") as f:
        left = size
        while left:
            n = min(left, 1 << 20)
            f.write(os.urandom(n))
            left -= n
    return path


def run(ctx: Context):
    size = tools.parse_size(ctx.params["size"])
    src = _source(size)
    dst = ctx.mnt / "big"
    sh = lambda cmd: ["sh", "-c", cmd]   # noqa: E731 (a pipeline or a redirection)
    try:
        readers = {
            "cat-cold": sh(f"cat '{dst}' >/dev/null"),
            "sha256sum-cold": ["sha256sum", str(dst)],
            "python-read-cold": ["python3", "-c", f"open('{dst}', 'rb').read()"],
            "tar-cold": sh(f"tar -C '{ctx.mnt}' -cf - big | cat >/dev/null"),
            "dd-4k-cold": ["dd", f"if={dst}", "of=/dev/null", "bs=4k", "status=none"],
        }
        for _ in range(ctx.int("loops")):
            dst.unlink(missing_ok=True)
            ctx.status("cp into the mount")
            secs, _ = ctx.timed(["cp", src, str(dst)])
            yield "time", "cp-in", secs
            for step, cmd in readers.items():
                ctx.status(step)
                ctx.drop_caches()
                secs, _ = ctx.timed(cmd)
                yield "time", step, secs
            secs, _ = ctx.timed(readers["cat-cold"])   # again, without dropping caches
            yield "time", "cat-warm", secs
        dst.unlink(missing_ok=True)
    finally:
        os.unlink(src)


WORKLOAD = Workload(
    name="bigfile",
    summary="cp, cat, sha256sum, Python, tar and dd bs=4k on one large file, cold and warm",
    seed="002 (mm: tmpfs/page allocator overhead)",
    params=[
        Param("size", "256M", "4M", "file size (k/M/G suffixes)"),
        Param("loops", "1", "1", "copy-and-read passes per mount"),
    ],
    metrics=[
        Metric("time", "time per step", "s", False, "step", summary=True),
    ],
    parts=[
        Part("steps", ("time",), run, ("cp", "cat", "sha256sum", "tar", "dd"),
             lambda p: list(STEPS)),
    ],
)
