"""depth: creating and deleting files deep in a directory tree. Each name made or removed in
an export of a host directory must not be in a directory moved out of the export on the
host; what that check costs must not grow with the directory's depth (tmpfs has no such
cost at any depth).

For each depth D a chain of D nested directories is made (untimed), then FILES empty files
are created and unlinked in the deepest one through a descriptor of it (no path walk);
files per second of create+unlink.
"""

from __future__ import annotations

import os
import time

from . import Context, Metric, Param, Part, Workload, split_list


def chain(top: int, depth: int) -> int:
    """A descriptor of the deepest of `depth` directories nested under `top`."""
    fd = os.dup(top)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    return fd


def depth(ctx: Context):
    n = ctx.int("files")
    for d in ctx.ints("depths"):
        top = ctx.mnt / f"depth{d}"
        top.mkdir()
        ctx.status(f"chain of {d} directories")
        tfd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fd = chain(tfd, d)
        finally:
            os.close(tfd)
        try:
            ctx.status(f"create+unlink {n} files at depth {d}")
            names = [f"f{i}" for i in range(n)]
            t0 = time.perf_counter()
            for name in names:
                os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644, dir_fd=fd))
            for name in names:
                os.unlink(name, dir_fd=fd)
            secs = time.perf_counter() - t0
        finally:
            os.close(fd)
        yield "create-unlink", str(d), n / secs


WORKLOAD = Workload(
    name="depth",
    summary="create+unlink files at directory depth D (files/s per depth)",
    seed="(none: confinement of an export, issue 41)",
    params=[
        Param("depths", "1,512,4096", "1,16", "directory depths, comma separated"),
        Param("files", "2000", "50", "files created, then unlinked, at each depth"),
    ],
    metrics=[Metric("create-unlink", "files created and unlinked at a depth", "files/s", True,
                    "depth", "Depth")],
    parts=[Part("create-unlink", ("create-unlink",), depth, (),
                lambda p: split_list(p["depths"]))],
)
