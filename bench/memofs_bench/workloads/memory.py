"""memory (seed 002, what storing data costs): the server's resident memory and the kernel's
shared memory (tmpfs pages) grown by writing SIZE bytes, and by creating FILES empty files.

Server RSS is summed over the processes serving the mount (none for kernel tmpfs); Shmem is
the system-wide /proc/meminfo figure, so run nothing else meanwhile.
"""

from __future__ import annotations

import os

from .. import mounts, tools
from . import Context, Metric, Param, Part, Workload


def server_rss(ctx: Context) -> int:
    total = 0
    for pid in mounts.pids_with_arg(str(ctx.mnt)):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def shmem() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
    return 0


def data(ctx: Context):
    size = ctx.sizes("size")[0]
    ctx.status(f"writing {size >> 20} MiB")
    rss0, sh0 = server_rss(ctx), shmem()
    ctx.run(["dd", "if=/dev/zero", "of=data", "bs=1M", f"count={size >> 20}", "conv=fdatasync"])
    gib = size / (1 << 30)
    yield "rss-data", "data", (server_rss(ctx) - rss0) / (1 << 20) / gib
    yield "shmem-data", "data", (shmem() - sh0) / (1 << 20) / gib
    os.remove(ctx.mnt / "data")


def inodes(ctx: Context):
    n = ctx.int("files")
    ctx.status(f"creating {n} empty files")
    rss0 = server_rss(ctx)
    ctx.run(["python3", "-c", "import os,sys\nfor i in range(int(sys.argv[1])): "
             "os.close(os.open('f%d' % i, os.O_CREAT | os.O_WRONLY, 0o644))", str(n)])
    yield "rss-inode", "files", (server_rss(ctx) - rss0) / n


WORKLOAD = Workload(
    name="memory",
    summary="server RSS and kernel Shmem per GiB stored, server RSS per empty file",
    seed="002 (memory cost of the data path)",
    params=[
        Param("size", "1G", "8M", "bytes written (k/M/G suffixes)"),
        Param("files", "100000", "1000", "empty files created"),
    ],
    metrics=[
        Metric("rss-data", "server RSS per GiB stored", "MiB/GiB", False, "what"),
        Metric("shmem-data", "kernel Shmem per GiB stored", "MiB/GiB", False, "what"),
        Metric("rss-inode", "server RSS per empty file", "bytes", False, "what"),
    ],
    # Inodes first: memory freed by the data part would otherwise be reused for them.
    parts=[
        Part("inodes", ("rss-inode",), inodes, ("python3",), lambda p: ["files"]),
        Part("data", ("rss-data", "shmem-data"), data, ("dd",), lambda p: ["data"]),
    ],
)
