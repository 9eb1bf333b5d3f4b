"""migrate: a virtio-fs guest live-migrated by QEMU 10.0.2 (TCG, 512 MiB of guest memory,
two QEMUs with memory of their own on this host, over a unix socket), on the mig-* targets
only: the downtime and total time QEMU reports (`query-migrate`), for each size of file data
the guest's filesystem holds.

Per size: a fresh source server and QEMU; the file written (in the guest with dd for the mem
backend, whose files move in the VM's state; on the host for a shared directory, whose files
stay where they are, the guest holding it looked up); a destination server and QEMU waiting
with `-incoming defer`; for mig-memofs-ahead the data sent ahead first (`memofs migrate`,
its time reported apart: it runs while the VM runs); then QEMU's migration. Checked: it
completes unblocked, and the guest on the destination sees the file's size. With memofs the
bytes of the state the source saved are reported too. QEMU limits its own expected downtime to
300 ms by default, and pre-copies guest memory until it fits; whatever a device puts in its
state comes on top.
"""

from __future__ import annotations

import socket

from .. import tools
from ..guest_targets import virtiofsd_binary
from ..migration import Bed, Env, qemu10, state_bytes
from ..targets import require_memofs
from ..tools import CheckFailed
from ..vm import initramfs, kernel
from . import Context, Metric, Param, Part, Workload

MIB = 1 << 20


def free_port() -> int:
    """A TCP port of the loopback address nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fill_host(path, size: int) -> None:
    """`size` bytes of data at `path`, written (no holes)."""
    block = b"\x5a" * MIB
    with open(path, "wb") as f:
        for at in range(0, size, MIB):
            f.write(block[:min(MIB, size - at)])


def one_size(ctx: Context, env: Env, size: int):
    t = ctx.target
    bed = Bed(env, "bench")
    try:
        args = list(t.args)
        if t.shared:
            share = bed.work / "share"
            share.mkdir()
            fill_host(share / "data", size)
            args = ["--shared-dir", str(share), *args]
        src_server = bed.server(args, virtiofsd=t.virtiofsd)
        src = bed.vm(src_server)
        g = src.guest
        n = size // MIB
        fill = ("stat /mnt/data >/dev/null" if t.shared else
                f"dd if=/dev/zero of=/mnt/data bs=1M count={n} conv=fsync 2>/dev/null")
        g.check(f"mount -t virtiofs fs /mnt && {fill}", "filling the filesystem", 1800)
        port = free_port()
        dst_args = args + ([f"--migration-listen=127.0.0.1:{port}"] if t.ahead else [])
        dst_server = bed.server(dst_args, virtiofsd=t.virtiofsd)
        dst = bed.vm(dst_server, incoming=True)
        label = tools.format_size(size)
        if t.ahead:
            secs, r = ctx.timed([env.memofs, "migrate", str(src_server.sock),
                                 f"127.0.0.1:{port}"], check=False)
            if r.returncode != 0:
                raise CheckFailed(f"memofs migrate: {(r.stdout + r.stderr).strip()[-300:]}")
            yield "ahead", label, secs
        info = bed.migrate(src, dst)
        if info["blocked-reasons"]:
            raise CheckFailed(f"migration blocked: {info['blocked-reasons']}")
        if info.get("status") != "completed":
            raise CheckFailed(f"migration {info.get('status')}: {info.get('error-desc', '?')}")
        yield "downtime", label, float(info["downtime"])
        yield "total", label, float(info["total-time"])
        saved = None if t.virtiofsd else state_bytes(src_server, "saved")
        if saved is not None:
            yield "state", label, float(saved)
        got = dst.guest.check("stat -c %s /mnt/data", "the file after the move").strip()
        if got != str(size):
            raise CheckFailed(f"the file is {got} bytes after the move, {size} before")
    finally:
        bed.end()
        bed.remove()


def run(ctx: Context):
    k = kernel(ctx.params["kernel"])
    initrd = initramfs(ctx.mnt / "initrd.cpio", {}, k)
    env = Env(require_memofs(), qemu10(), k, initrd, virtiofsd_binary())
    for size in ctx.sizes("sizes"):
        ctx.status(tools.format_size(size))
        yield from one_size(ctx, env, size)


def prepare(params: dict) -> None:
    kernel(params["kernel"])
    qemu10()


WORKLOAD = Workload(
    name="migrate",
    summary="live migration of a virtio-fs guest by QEMU 10 (TCG): downtime and total time "
            "for each size of file data, memofs's two backends (the mem backend with and "
            "without its data sent ahead) against virtiofsd",
    seed="-",
    params=[
        Param("kernel", "7.3", "7.3", "guest kernel: an id of scripts/vm/kernels.tsv"),
        Param("sizes", "0,256M,1G", "0,16M", "bytes of file data in the guest's filesystem"),
    ],
    metrics=[Metric("downtime", "downtime QEMU reports", "ms", False, "data", summary=True),
             Metric("total", "total time QEMU reports", "ms", False, "data", summary=True),
             Metric("ahead", "the data sent ahead (memofs migrate), while the VM runs", "s",
                    False, "data", summary=True),
             Metric("state", "the state the source's server saved", "bytes", False, "data",
                    summary=True)],
    parts=[Part("migrate", ("downtime", "total", "ahead", "state"), run,
                ("busybox", "cpio"),
                lambda p: [tools.format_size(tools.parse_size(s)) for s in p["sizes"].split(",")])],
    prepare=prepare,
    moves=True,
)
