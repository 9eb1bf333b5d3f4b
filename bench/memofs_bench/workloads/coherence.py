"""coherence (seed 001's open problem): how long a change made on the host, behind the FUSE
server's back, takes to show through the mount.

For targets that export a host directory (memofs-pt, passthrough_ll, bindfs). For each of
NAMES names: stat it through the mount (so the kernel may cache the miss), create it in the
host directory, then stat it through the mount until it appears; later delete it on the
host and stat until it is gone. Latency is from the host-side syscall's return to the first
stat that sees the change. A name still stale after TIMEOUT seconds counts as stale (the
kernel kept a cached answer: a timeout-only server with long timeouts); its latency is not
recorded, and its delete is not measured (it would look instant against the stale miss).
Polling spins for the first millisecond, then sleeps 100 us between stats.
"""

from __future__ import annotations

import os
import time

from . import Context, Metric, Param, Part, Workload


def _wait(path: str, want_exists: bool, timeout: float) -> float | None:
    """Seconds until `path` exists (or not) through the mount, None after `timeout`."""
    t0 = time.perf_counter()
    while True:
        try:
            os.stat(path)
            exists = True
        except FileNotFoundError:
            exists = False
        now = time.perf_counter()
        if exists == want_exists:
            return now - t0
        if now - t0 > timeout:
            return None
        if now - t0 > 1e-3:
            time.sleep(1e-4)


def create_delete(ctx: Context, made: str, seen: str, prefix: str):
    """NAMES times: a name is looked up in `seen` (the kernel may cache the miss), created in
    `made`, and stat()ed in `seen` until it appears; then deleted in `made` until it is gone
    in `seen`. Yields the latencies (ms from the syscall's return) and the stale shares."""
    n, timeout = ctx.int("names"), float(ctx.params["timeout"])
    stale = {"create": 0, "delete": 0}
    for i in range(n):
        ctx.status(f"change {i + 1}/{n}")
        name = f"{prefix}-{os.getpid()}-{i}"
        at, there = os.path.join(made, name), os.path.join(seen, name)
        if os.path.exists(there):
            raise ValueError(f"{name} exists before the test")
        os.close(os.open(at, os.O_CREAT | os.O_WRONLY, 0o644))
        lat = _wait(there, True, timeout)
        if lat is None:
            os.unlink(at)
            # Never seen: a delete would look instant against the stale miss; not measured.
            stale["create"] += 1
            continue
        yield "latency", "create", lat * 1e3
        os.unlink(at)
        lat = _wait(there, False, timeout)
        if lat is None:
            stale["delete"] += 1
        else:
            yield "latency", "delete", lat * 1e3
    yield "stale", "create", 100.0 * stale["create"] / n
    if stale["create"] < n:
        yield "stale", "delete", 100.0 * stale["delete"] / (n - stale["create"])


def changes(ctx: Context):
    yield from create_delete(ctx, str(ctx.source), str(ctx.mnt), "coherence")


WORKLOAD = Workload(
    name="coherence",
    summary="host-side create/delete in the exported directory until visible through the mount",
    seed="001 (negative dentries on FUSE/virtio-fs: stale until the timeout)",
    params=[
        Param("names", "50", "5", "host-side create+delete pairs per round"),
        Param("timeout", "3", "3", "seconds after which a change counts as stale (longer than "
              "the peers' 1 s default timeouts, so their staleness is measured, not cut off)"),
    ],
    metrics=[
        Metric("latency", "host change visible through the mount", "ms", False, "change"),
        Metric("stale", "changes still invisible after the timeout", "%", False, "change"),
    ],
    parts=[Part("host-changes", ("latency", "stale"), changes, (),
                lambda p: ["create", "delete"], needs_source=True)],
)
