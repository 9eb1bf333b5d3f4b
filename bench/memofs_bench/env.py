"""What the samples were measured on: kernel, CPU, tools, memofs build, placement."""

from __future__ import annotations

import datetime as dt
import os
import platform
import resource
import shutil
import struct
import subprocess
from pathlib import Path

from . import __version__
from .targets import memofs_binary
from .tools import REPO, BenchError, ToolMissing, helper


def _first_line(cmd: list[str]) -> str | None:
    if not shutil.which(cmd[0]) and not os.path.isfile(cmd[0]):
        return None
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable ({e})"
    text = (r.stdout or r.stderr).strip()
    return text.splitlines()[0] if text else None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_model() -> str:
    info = _read("/proc/cpuinfo") or ""
    for line in info.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


VIRTIO_ID_BALLOON = 0x0005
VIRTIO_BALLOON_F_REPORTING = 5


def free_page_reporting() -> bool:
    """Whether a virtio balloon reports free memory to the hypervisor (free page reporting).

    Then free blocks of 2 MiB and more that stay free for a few seconds are handed back to
    the host, and the next large allocation faults them in again on the host side: the first
    large-folio write after an idle spell runs several times slower than the next one (seen
    with kernel tmpfs `huge=within_size` as with memofs). Recorded so reports say so.
    """
    for dev in Path("/sys/bus/virtio/devices").glob("*"):
        device = _read(str(dev / "device"))
        features = _read(str(dev / "features")) or ""
        if device and int(device, 16) == VIRTIO_ID_BALLOON \
                and features[VIRTIO_BALLOON_F_REPORTING:VIRTIO_BALLOON_F_REPORTING + 1] == "1":
            return True
    return False


def now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


# Round trips per pipe measurement: about a second where a wake-up costs 50 µs.
PIPE_ITERS = 20000


def pipe_roundtrip_us(iters: int = PIPE_ITERS) -> dict:
    """Mean microseconds per round trip of one byte between two processes over pipes
    (csrc/pipe_roundtrip.c): placed by the scheduler ("free"), on two CPUs, on one CPU. Then
    the same while a CPU latency request of 0 is held (/dev/cpu_dma_latency, what memofs's
    `cpu_latency` option asks for while requests stream), where the device can be opened. A
    FUSE request that a caller waits for costs at least one such round trip."""
    try:
        exe = str(helper("pipe_roundtrip"))
    except (BenchError, ToolMissing) as e:
        return {"error": str(e)}
    cpus = sorted(os.sched_getaffinity(0))
    placements = {"free": []}
    if len(cpus) >= 2:
        placements["two_cpus"] = [str(cpus[0]), str(cpus[1])]
    placements["one_cpu"] = [str(cpus[0])] * 2

    def measure() -> dict:
        out = {}
        for name, args in placements.items():
            try:
                r = subprocess.run([exe, str(iters), *args], capture_output=True, text=True,
                                   timeout=120)
                out[name] = float(r.stdout) if r.returncode == 0 else None
            except (subprocess.TimeoutExpired, ValueError):
                out[name] = None
        return out

    result = {"idle": measure()}
    try:
        fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
    except OSError:
        return result
    try:
        os.write(fd, struct.pack("i", 0))
        result["cpu_latency_0"] = measure()
    finally:
        os.close(fd)
    return result


def _pipe_summary(p: dict | None) -> str | None:
    if not p or "error" in p:
        return p and p.get("error")
    def one(m: dict) -> str:
        return ", ".join(f"{k.replace('_', ' ')} {v:.1f}" if v is not None else f"{k} failed"
                         for k, v in m.items())
    s = one(p["idle"])
    if "cpu_latency_0" in p:
        s += f"; holding a CPU latency request of 0: {one(p['cpu_latency_0'])}"
    return s


def capture(pipe_iters: int = PIPE_ITERS) -> dict:
    mem = next((line.split()[1] for line in (_read("/proc/meminfo") or "").splitlines()
                if line.startswith("MemTotal")), None)
    memofs = memofs_binary()
    git = None
    if shutil.which("git") and (REPO / ".git").exists():
        r = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                           capture_output=True, text=True)
        git = r.stdout.strip() or None
    return {
        "time": now(),
        "hostname": platform.node(),
        "kernel": " ".join(os.uname()),
        "cpu_model": cpu_model(),
        "online_cpus": os.cpu_count(),
        "memory_kib": int(mem) if mem else None,
        "runner_affinity": sorted(os.sched_getaffinity(0)),
        "cpufreq_governor": _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "thp": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "free_page_reporting": free_page_reporting(),
        "fuse_max_pages_limit": _read("/proc/sys/fs/fuse/max_pages_limit"),
        "python": platform.python_version(),
        "memofs_bench": __version__,
        "repo_commit": git,
        "memofs_binary": memofs,
        "memofs_version": _first_line([memofs, "--version"]) if memofs else None,
        "perf": _first_line(["perf", "--version"]),
        "cc": _first_line(["cc", "--version"]),
        "fusermount3": _first_line(["fusermount3", "--version"]),
        "bindfs": _first_line(["bindfs", "--version"]),
        "nofile_limit": list(resource.getrlimit(resource.RLIMIT_NOFILE)),
        "pipe_roundtrip_us": pipe_roundtrip_us(pipe_iters),
    }


# Servers that keep a descriptor per inode the kernel holds (memofs-pt, passthrough_ll) need
# one per file of a large tree; systemd's default hard limit is 524288, some sandboxes have
# 20000. Raised for the servers the harness starts (they raise their soft limit themselves).
NOFILE_HARD = 1 << 20


def raise_nofile_limit() -> str | None:
    """Raise the hard RLIMIT_NOFILE (inherited by the servers started) to NOFILE_HARD, or
    as far as fs.nr_open allows; the soft limit is left alone. A note if it could not."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(NOFILE_HARD, int(_read("/proc/sys/fs/nr_open") or NOFILE_HARD))
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, want))
        except (OSError, ValueError) as e:
            return f"cannot raise the descriptor limit to {want} ({e}): FUSE servers that " \
                   f"keep one per inode may fail on large trees (hard limit {hard})"
    return None


def summary_lines(env: dict) -> list[str]:
    keys = ["time", "kernel", "cpu_model", "online_cpus", "memory_kib", "runner_affinity",
            "thp", "free_page_reporting", "nofile_limit", "repo_commit", "memofs_binary", "memofs_version",
            "perf", "cc"]
    lines = [f"{k}: {env.get(k)}" for k in keys if k in env]
    if "pipe_roundtrip_us" in env:
        lines.append(f"pipe_roundtrip_us: {_pipe_summary(env['pipe_roundtrip_us'])}")
    return lines
