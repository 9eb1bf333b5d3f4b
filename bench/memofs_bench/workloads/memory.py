"""memory (seed 002, what storing data costs): the server's resident memory and the kernel's
shared memory (tmpfs pages) grown by writing SIZE bytes, and by creating FILES empty files;
and what data written sparsely costs against what was written: SPARSE_PERCENT of the 4 KiB
pages of a SPARSE_SIZE file written at random offsets (a database-like file), and SMALL_FILES
files of a few KiB each (a source tree); and what xfstests' fsstress leaves (FSSTRESS_OPS
operations in 4 processes, seed 1234: files of every size, holes, links, xattrs), when fsstress
is on PATH (`make bench-reports` puts the one scripts/xfstests/build.sh builds there,
bench/fsstress-build.sh installs it; without it the part is noted as skipped).

Server RSS is summed over the processes serving the mount (none for kernel tmpfs); Shmem is
the system-wide /proc/meminfo figure, so run nothing else meanwhile. The sparse and small-file
parts report Shmem plus server RSS per GiB of data written: 1024 is a byte kept per byte
written; large folios (`huge=`) show as more.
"""

from __future__ import annotations

import os
import time

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
    rss0, sh0 = settled(ctx)
    ctx.run(["dd", "if=/dev/zero", "of=data", "bs=1M", f"count={size >> 20}", "conv=fdatasync"])
    gib = size / (1 << 30)
    yield "rss-data", "data", (server_rss(ctx) - rss0) / (1 << 20) / gib
    yield "shmem-data", "data", (shmem() - sh0) / (1 << 20) / gib
    os.remove(ctx.mnt / "data")


def settled(ctx: Context, limit: float = 30.0) -> tuple[int, int]:
    """Server RSS and Shmem once neither has moved by more than 1 MiB for two seconds
    (memory an earlier part freed goes back asynchronously: the kernel's FORGETs, then the
    server's trim half a second after the last free), or after `limit` seconds."""
    deadline = time.monotonic() + limit
    now = (server_rss(ctx), shmem())
    steady = 0
    while time.monotonic() < deadline and steady < 4:
        time.sleep(0.5)
        last, now = now, (server_rss(ctx), shmem())
        moved = any(abs(a - b) >= (1 << 20) for a, b in zip(last, now))
        steady = 0 if moved else steady + 1
    return now


def kept_per_gib(ctx: Context, script: str, *args: str) -> float:
    """Shmem plus server RSS grown by running the Python `script` in the mount, in MiB per
    GiB of the bytes it says (its output) it wrote."""
    rss0, sh0 = settled(ctx)
    r = ctx.run(["python3", "-c", script, *args])
    written = int(r.stdout.strip())
    grown = (server_rss(ctx) - rss0) + (shmem() - sh0)
    return grown / (1 << 20) / (written / (1 << 30))


SPARSE = """import os, random, sys
size, percent = int(sys.argv[1]), float(sys.argv[2])
pages = size // 4096
chosen = random.Random(1234).sample(range(pages), int(pages * percent / 100))
block = b"x" * 4096
fd = os.open("sparse", os.O_CREAT | os.O_WRONLY, 0o644)
os.ftruncate(fd, size)
for p in chosen:
    os.pwrite(fd, block, p * 4096)
os.fsync(fd)
os.close(fd)
print(len(chosen) * 4096)
"""


def sparse(ctx: Context):
    size = ctx.sizes("sparse_size")[0]
    percent = float(ctx.params["sparse_percent"])
    ctx.status(f"writing {percent}% of a {size >> 20} MiB file at random 4 KiB pages")
    yield "kept-sparse", "sparse", kept_per_gib(ctx, SPARSE, str(size), str(percent))
    os.remove(ctx.mnt / "sparse")


SMALL = """import os, sys
n = int(sys.argv[1])
total = 0
for i in range(n):
    d = "d%d" % (i // 100)
    if i % 100 == 0:
        os.mkdir(d)
    data = b"y" * (1024 + (i * 733) % 7168)
    with open("%s/f%d" % (d, i), "wb") as f:
        f.write(data)
    total += len(data)
print(total)
"""


def small_files(ctx: Context):
    n = ctx.int("small_files")
    ctx.status(f"writing {n} files of 1-8 KiB")
    yield "kept-small", "small files", kept_per_gib(ctx, SMALL, str(n))


def inodes(ctx: Context):
    n = ctx.int("files")
    ctx.status(f"creating {n} empty files")
    rss0 = server_rss(ctx)
    ctx.run(["python3", "-c", "import os,sys\nfor i in range(int(sys.argv[1])): "
             "os.close(os.open('f%d' % i, os.O_CREAT | os.O_WRONLY, 0o644))", str(n)])
    yield "rss-inode", "files", (server_rss(ctx) - rss0) / n


def fsstress(ctx: Context):
    ops = ctx.int("fsstress_ops")
    ctx.status(f"fsstress: {ops} operations in 4 processes")
    rss0, sh0 = settled(ctx)
    ctx.run(["fsstress", "-d", str(ctx.mnt / "fsstress"), "-p", "4", "-n", str(ops),
             "-s", "1234"])
    grown = (server_rss(ctx) - rss0) + (shmem() - sh0)
    yield "kept-fsstress", "fsstress", grown / (1 << 20)
    ctx.run(["rm", "-rf", str(ctx.mnt / "fsstress")])


WORKLOAD = Workload(
    name="memory",
    summary="server RSS and kernel Shmem per GiB stored, server RSS per empty file",
    seed="002 (memory cost of the data path)",
    params=[
        Param("size", "1G", "8M", "bytes written (k/M/G suffixes)"),
        Param("files", "100000", "1000", "empty files created"),
        Param("sparse_size", "1G", "16M", "size of the sparse file (k/M/G suffixes)"),
        Param("sparse_percent", "10", "10", "percent of its 4 KiB pages written, at random"),
        Param("small_files", "20000", "200", "files of 1-8 KiB written"),
        Param("fsstress_ops", "10000", "500", "fsstress operations per process"),
    ],
    metrics=[
        Metric("rss-data", "server RSS per GiB stored", "MiB/GiB", False, "what"),
        Metric("shmem-data", "kernel Shmem per GiB stored", "MiB/GiB", False, "what"),
        Metric("rss-inode", "server RSS per empty file", "bytes", False, "what"),
        Metric("kept-sparse", "Shmem + server RSS per GiB written sparsely", "MiB/GiB", False,
               "what"),
        Metric("kept-small", "Shmem + server RSS per GiB written as small files", "MiB/GiB",
               False, "what"),
        Metric("kept-fsstress", "Shmem + server RSS left by fsstress", "MiB", False, "what"),
    ],
    # Inodes first: memory freed by the data part would otherwise be reused for them.
    parts=[
        Part("inodes", ("rss-inode",), inodes, ("python3",), lambda p: ["files"]),
        Part("data", ("rss-data", "shmem-data"), data, ("dd",), lambda p: ["data"]),
        Part("sparse", ("kept-sparse",), sparse, ("python3",), lambda p: ["sparse"]),
        Part("small-files", ("kept-small",), small_files, ("python3",),
             lambda p: ["small files"]),
        Part("fsstress", ("kept-fsstress",), fsstress, ("fsstress",), lambda p: ["fsstress"],
             optional=True),
    ],
)
