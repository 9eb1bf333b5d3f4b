"""guest-fio: fio's 4 KiB random reads and random writes in a virtio-fs guest (QEMU TCG), on
the vm-* targets only: IOPS at queue depth 1 and 16 with 1 and 2 guest vCPUs, to compare how
servers spread a queue's requests over host threads (`--thread-pool-size=N` on the target's
command line, e.g. `vm-memofs-pt:--thread-pool-size=4` against
`vm-virtiofsd:--thread-pool-size=4`).

Each round boots a guest per target with the most vCPUs of CPUS and Debian's fio (with the
libraries ldd lists) in its initramfs. fio lays out one SIZE file on /mnt (untimed). Then for
each vCPU count, the most first, the guest takes the other vCPUs offline (none comes back
online: the guest runs as it booted, then as if booted with fewer), and for each of RW and
IODEPTH one fio job runs for RUNTIME seconds with O_DIRECT, so that every I/O is a READ or
WRITE request to the server: psync at depth 1, ENGINE (io_uring) deeper. fio's JSON comes
back compressed over the agent's port; its IOPS is the result, with the server's CPU time
over the run (user plus system, every process of the server) and that per I/O. Under TCG a
vCPU is a host thread: the guest's vCPUs, QEMU's own threads and the server's threads share
the host's CPUs, and a pool's workers are measured against that.
"""

from __future__ import annotations

import base64
import gzip
import json
import shutil

from .. import mounts, tools
from ..tools import CheckFailed, ToolMissing
from ..vm import GuestSetup, binary_files, kernel
from . import Context, Metric, Param, Part, Workload, split_list

FIO = "/usr/bin/fio"
FILE = "r"     # fio's job name: the file is /mnt/r.0.0


def _fio() -> str:
    host = shutil.which("fio")
    if host is None:
        raise ToolMissing("fio is not installed (apt-get install fio)")
    return host


def setup(params: dict) -> GuestSetup:
    cpus = max(int(c) for c in split_list(params["cpus"]))
    return GuestSetup(params["kernel"], binary_files(_fio(), FIO), int(params["memory"]), cpus)


def prepare(params: dict) -> None:
    _fio()
    kernel(params["kernel"])


def label(rw: str, depth: int, cpus: int) -> str:
    return f"{rw}-qd{depth}-{cpus}cpu"


def labels(params: dict) -> list[str]:
    return [label(rw, int(d), c) for c in sorted({int(c) for c in split_list(params["cpus"])})
            for rw in split_list(params["rw"]) for d in split_list(params["iodepth"])]


def job(params: dict, rw: str, depth: int, extra: str = "") -> str:
    """fio's command line for one run, its JSON to /tmp/fio.json."""
    engine = "psync" if depth == 1 else params["engine"]
    return (f"{FIO} --name={FILE} --directory=/mnt --rw={rw} --bs=4k --size={params['size']} "
            f"--iodepth={depth} --ioengine={engine} --direct=1 --numjobs=1 --group_reporting "
            f"--runtime={params['runtime']} --time_based --clat_percentiles=0 "
            f"--output-format=json --output=/tmp/fio.json {extra}").strip()


def online(cpus: int) -> str:
    """A guest script that leaves vCPUs 0..cpus-1 online and the others offline."""
    return ("for d in /sys/devices/system/cpu/cpu[0-9]*; do n=${d##*cpu}; "
            f"[ -e $d/online ] || continue; if [ $n -lt {cpus} ]; then echo 1 >$d/online; "
            "else echo 0 >$d/online; fi; done; cat /sys/devices/system/cpu/online")


def result(out: str) -> dict:
    """fio's JSON from the guest's `gzip | base64` of it."""
    try:
        return json.loads(gzip.decompress(base64.b64decode("".join(out.split()))))
    except (ValueError, OSError) as e:
        raise CheckFailed(f"fio's output did not come back whole ({e}): {out.strip()[-200:]}")


def runs(ctx: Context):
    guest = ctx.guest
    if guest is None:
        raise CheckFailed("the guest-fio workload ran without a guest")
    p = ctx.params
    size = tools.parse_size(p["size"])
    ctx.status("laying out the file")
    guest.check(job(p, "write", 1, "--create_only=1") +
                f' && [ "$(stat -c %s /mnt/{FILE}.0.0)" = {size} ]', "laying out fio's file")
    deep = [int(d) for d in split_list(p["iodepth"]) if int(d) > 1]
    if deep and p["engine"] == "io_uring":
        guest.check("[ -e /proc/sys/kernel/io_uring_disabled ] && "
                    '[ "$(cat /proc/sys/kernel/io_uring_disabled)" = 0 ]',
                    "io_uring in the guest's kernel (or pass engine=libaio)")
    qemu, limit = [guest.proc.pid], float(p["runtime"]) * 10 + 120
    for cpus in sorted(set(ctx.ints("cpus")), reverse=True):
        want = "0" if cpus == 1 else f"0-{cpus - 1}"
        got = guest.check(online(cpus), f"leaving {cpus} vCPU(s) online").strip()
        if got != want:
            raise CheckFailed(f"the guest has vCPUs {got} online, not {want}")
        for rw in ctx.list("rw"):
            for depth in ctx.ints("iodepth"):
                name = label(rw, depth, cpus)
                ctx.status(name)
                cpu0, vm0 = ctx.server_cpu(), mounts.tree_cpu_seconds(qemu)
                rc, out, secs = guest.run(job(p, rw, depth), timeout=limit)
                cpu1, vm1 = ctx.server_cpu(), mounts.tree_cpu_seconds(qemu)
                if rc != 0:
                    raise CheckFailed(f"{name}: fio failed (exit {rc}): {out.strip()[-300:]}")
                doc = result(guest.check("gzip -c /tmp/fio.json | base64", "reading fio's JSON"))
                j = doc["jobs"][0]
                side = j["read" if "read" in rw else "write"]
                if j.get("error") or side["total_ios"] == 0:
                    raise CheckFailed(f"{name}: fio did no I/O (error {j.get('error')})")
                detail = {"ios": side["total_ios"],
                          "lat_us": round(side["lat_ns"]["mean"] / 1e3, 1),
                          "runtime_ms": side["runtime"], "wall_s": round(secs, 2),
                          "engine": j["job options"]["ioengine"],
                          "usr_cpu": j.get("usr_cpu"), "sys_cpu": j.get("sys_cpu")}
                if vm0 is not None and vm1 is not None:
                    detail["qemu_cpu_s"] = round(vm1 - vm0, 2)
                yield "iops", name, float(side["iops"]), detail
                if cpu0 is not None and cpu1 is not None:
                    yield "server-cpu", name, cpu1 - cpu0
                    yield "server-us-per-io", name, (cpu1 - cpu0) / side["total_ios"] * 1e6


WORKLOAD = Workload(
    name="guest-fio",
    summary="fio 4 KiB random reads/writes (O_DIRECT) in a virtio-fs guest (TCG) at queue "
            "depths 1 and 16 on 1 and 2 vCPUs; IOPS and the server's CPU time",
    seed="—",
    params=[
        Param("kernel", "7.3", "7.3", "guest kernel: an id of scripts/vm/kernels.tsv"),
        Param("memory", "2048", "1024", "guest memory, MiB"),
        Param("cpus", "1,2", "1,2", "guest vCPUs online for a run (the guest boots with the "
              "most)"),
        Param("iodepth", "1,16", "1,4", "fio's iodepth (1: psync, else ENGINE)"),
        Param("rw", "randread,randwrite", "randread,randwrite", "fio's rw"),
        Param("size", "64M", "4M", "the file fio reads and writes"),
        Param("runtime", "10", "1", "seconds per fio run"),
        Param("engine", "io_uring", "io_uring", "fio's ioengine above depth 1 (io_uring, "
              "libaio)"),
    ],
    metrics=[Metric("iops", "fio 4 KiB IOPS", "IOPS", True, "run", summary=True),
             Metric("server-cpu", "server CPU time per fio run (user plus system, every "
                    "process of the server)", "CPU-s", False, "run", summary=True,
                    server_cost=True),
             Metric("server-us-per-io", "server CPU time per I/O", "CPU-us", False, "run",
                    summary=True, server_cost=True)],
    parts=[Part("fio", ("iops", "server-cpu", "server-us-per-io"), runs,
                ("qemu-system-x86_64", "busybox", "cpio", "fio", "ldd"), labels)],
    prepare=prepare,
    guest=setup,
)
