#!/usr/bin/env python3
"""migrate-guest.py KERNEL-ID...: live migration of a virtio-fs guest by a real QEMU.

For each pinned kernel (scripts/vm/kernels.tsv): QEMU 10.0.2 (scripts/vm/qemu.sh; TCG, 512 MiB of
memfd guest memory, -smp 1) boots the benchmark harness's serial-agent guest
(bench/memofs_bench/vm.py) on a `memofs virtiofsd`; a second QEMU, started with `-incoming
defer` on a second server, takes the VM over a unix socket, both driven over QMP
(bench/memofs_bench/qmp.py, with the servers and QEMUs of bench/memofs_bench/migration.py). QEMU's own migration moves the guest's memory and the device's back-end
state (SET_DEVICE_STATE_FD), which our frontend test (memofs-vhost-migrate) cannot show: the
dirty-page log a real VMM copies memory by, and a guest kernel that keeps working across the
switch. Both QEMUs run with the `return-path` capability, without which the source cannot learn
that the destination refused the state and would stop the VM for good.
- mem: the mem backend, with work in flight across the switch: a reader loop (checksums of a
  64 MiB file, page cache dropped each time), a writer appending numbered lines through one
  open descriptor, a file unlinked while open, a listing loop. After: every checksum, line
  number and listing is right, with reads on both sides of the switch; the unlinked file
  reads; files old and new are right; the guest's `df` shows the same usage; the source's
  server ends once its QEMU quits.
- shared: `--shared-dir` (find-paths): a reader loop and a file held open across the switch;
  a file written in the guest afterwards shows on the host.
- handles: `--shared-dir --migration-mode file-handles`: a file unlinked while open moves.
- refused: a destination started with options the guest would tell apart (`-o noatime`,
  which INIT does not show): its server refuses the state, the migration fails
  and the VM runs on at the source; a second migration, to a server started like the
  source's, succeeds.
- lost: a destination exporting a copy of the directory without a file the guest holds:
  the migration fails (the VM runs on at the source); with `--migration-on-error=guest-error`
  it completes and only that file fails to read (EIO).
- virtiofsd: shared and handles again with virtiofsd ($VIRTIOFSD or on PATH), where installed.
Every migration must start with no `blocked-reasons` (QEMU 10 blocks a vhost-user backend
that cannot log dirty pages); its downtime and total time are printed. Prints PASS/FAIL/SKIP
lines and `vm-migrate-ID: N passed, N failed, N skipped`; exits 1 when anything failed. A
guest that cannot run here is skipped, or a failure with MEMOFS_VM_REQUIRED=1. Builds
and uses target/debug/memofs (or uses $MEMOFS), copied at start. Environment: CARGO, MEMOFS,
VIRTIOFSD, MEMOFS_VM_CACHE, MEMOFS_VM_REQUIRED, MEMOFS_VM_MIGRATE_ONLY (scenarios to run,
comma-separated).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TOP / "bench"))

from memofs_bench.tools import BenchError  # noqa: E402
from memofs_bench.vm import Guest, initramfs, kernel  # noqa: E402

from memofs_bench import qmp  # noqa: E402
from memofs_bench.migration import (VM, Bed, Env, Server, ServerError, qemu10,  # noqa: E402
                                    state_bytes, tail, until)
from memofs_bench.qmp import QMPError  # noqa: E402
from memofs_bench.tools import ToolMissing  # noqa: E402
from guestcheck import Run  # noqa: E402

MIB = 1 << 20
STOP = "/tmp/stop"       # the background loops end once this exists


def migrate(run: Run, bed: Bed, src: VM, dst: VM, name: str, want: str = "completed") -> dict:
    """Migrates `src` to `dst`; checks it starts unblocked and ends as `want`."""
    info = bed.migrate(src, dst)
    run.check(f"{name}-unblocked", not info["blocked-reasons"],
              "; ".join(info["blocked-reasons"]))
    status = info.get("status")
    detail = qmp.figures(info) if status == "completed" else \
        f"status {status}: {info.get('error-desc', '?')}"
    if status != want:
        detail += f"; destination: {tail(dst.guest.workdir / 'qemu.log')}"
    run.check(name, status == want, detail)
    return info


def values(g: Guest, script: str, what: str, timeout: float = 600) -> dict[str, str]:
    """The `key=value` lines `script` prints in the guest."""
    out = g.check(script, what, timeout)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def wait_in_guest(g: Guest, test: str, limit: float) -> bool:
    """Whether the shell test `test` held in the guest within `limit` s (polled there)."""
    rc, _, _ = g.run(f"end=$(($(date +%s) + {int(limit)})); while ! {{ {test}; }}; do "
                     f"[ $(date +%s) -ge $end ] && exit 1; sleep 0.1; done", timeout=limit + 60)
    return rc == 0


def loop(name: str, body: str, setup: str = ":") -> str:
    """A background loop running `body` until STOP exists, noting its end in /tmp/ended."""
    return (f"({setup}; while [ ! -e {STOP} ]; do {body}; done; echo {name} >>/tmp/ended) "
            f"</dev/null >/dev/null 2>&1 &")


def hold(name: str, path: str, unlink: bool = False) -> str:
    """A background process holding `path` open as its fd 3 (its pid in /tmp/NAME.pid), and
    a wait (up to 60 s) until it has it open."""
    rm = f"rm {path}; " if unlink else ""
    return (f"sh -c 'exec 3<{path}; {rm}exec sleep 100000' </dev/null >/dev/null 2>&1 &\n"
            f"echo $! >/tmp/{name}.pid; end=$(($(date +%s) + 60)); "
            f"while [ ! -e /proc/$!/fd/3 ] && [ $(date +%s) -lt $end ]; do sleep 0.1; done")


def reader(path: str) -> str:
    """A loop checksumming `path` from the server (the page cache dropped each time)."""
    return loop("reader", f"echo 1 >/proc/sys/vm/drop_caches; "
                          f"md5sum {path} >>/tmp/reads || echo failed >>/tmp/reads")


def stop_loops(g: Guest, count: int) -> bool:
    """Whether the `count` background loops ended within 300 s of being told to."""
    return wait_in_guest(g, f"touch {STOP} && [ $(cat /tmp/ended 2>/dev/null | wc -l) -ge "
                            f"{count} ]", 300)


def held(name: str) -> str:
    return f"$(md5sum </proc/$(cat /tmp/{name}.pid)/fd/3 | cut -d' ' -f1)"


def lines(g: Guest, path: str) -> int:
    return int(g.check(f"wc -l <{path}", f"counting {path}").strip())


def after_switch(run: Run, g: Guest, reads_before: int, md5: str) -> None:
    """The reader loop goes on at the destination, every checksum right."""
    ok = wait_in_guest(g, f"[ $(wc -l </tmp/reads) -ge {reads_before + 2} ]", 300)
    run.check("reads-go-on-after-the-switch", ok, f"{reads_before} reads before")
    v = values(g, f"echo bad=$(grep -vc '^{md5} ' /tmp/reads); echo n=$(wc -l </tmp/reads)",
               "counting reads")
    run.check("every-read-right", v["bad"] == "0" and int(v["n"]) > reads_before,
              f"{v['n']} reads ({reads_before} before the switch), {v['bad']} wrong")


def source_server_ends(run: Run, bed: Bed, vm: VM, server: Server) -> None:
    bed.quit(vm)
    secs = until(lambda: server.proc.poll() is not None, 30)
    run.check("source-server-ends-after-its-qemu", secs is not None and server.proc.poll() == 0,
              f"exit {server.proc.poll()}" if secs is not None else "still running after 30 s")


SMALL = ("cd /mnt && mkdir -p d0 d1 d2 && for d in d0 d1 d2; do for i in $(seq 1 100); do "
         "echo \"$d file $i\" >$d/f$i; done; done")
DIGESTS = ("echo big=$(md5sum </mnt/big | cut -d' ' -f1); "
           "echo small=$(cat /mnt/d*/f* | md5sum | cut -d' ' -f1)")
USED = "echo used=$(stat -f -c '%b %f' /mnt | awk '{print $1 - $2}')"


def free_port() -> int:
    """A TCP port of the loopback address nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mem(run: Run, bed: Bed, ahead: bool = False) -> None:
    """The mem backend's scenario; `ahead`: the files' data sent to the destination's
    server before QEMU migrates (`memofs migrate` to its --migration-listen), the background
    work changing files meanwhile."""
    src_server = bed.server([])
    src = bed.vm(src_server)
    g = src.guest
    before = values(g, f"""mount -t virtiofs fs /mnt
{SMALL}
head -c {64 * MIB} /dev/urandom >/mnt/big
head -c 100000 /dev/urandom >/mnt/gone
echo gone=$(md5sum </mnt/gone | cut -d' ' -f1)
{DIGESTS}
{USED}""", "filling the mem filesystem")
    g.check("\n".join([
        reader("/mnt/big"),
        loop("writer", "echo $i >&4; i=$((i + 1)); usleep 20000", "exec 4>>/mnt/log; i=0"),
        loop("lister", "ls /mnt/d0 | wc -l >>/tmp/lists"),
        hold("gone", "/mnt/gone", unlink=True)]), "starting the background work")
    ok = wait_in_guest(g, "[ -s /tmp/reads ] && [ -s /tmp/lists ] && [ -s /mnt/log ] && "
                          "[ ! -e /mnt/gone ]", 300)
    run.check("background-work-runs", ok)
    port = free_port()
    dst_server = bed.server([f"--migration-listen=127.0.0.1:{port}"] if ahead else [])
    dst = bed.vm(dst_server, incoming=True)
    if ahead:
        sent = subprocess.run([bed.env.memofs, "migrate", str(src_server.sock),
                               f"127.0.0.1:{port}"], capture_output=True, text=True,
                              timeout=600)
        run.check("data-sent-ahead", sent.returncode == 0,
                  " ".join((sent.stdout + sent.stderr).split())[-200:])
    reads, logged = lines(g, "/tmp/reads"), lines(g, "/mnt/log")
    if migrate(run, bed, src, dst, "migrates")["status"] != "completed":
        return
    if ahead:
        # What the state carried: what changed since, not the 64 MiB file.
        saved = state_bytes(src_server, "saved")
        run.check("state-carries-only-what-changed", saved is not None and saved < 16 * MIB,
                  f"{saved} bytes")
    source_server_ends(run, bed, src, src_server)
    g = dst.guest
    after_switch(run, g, reads, before["big"])
    ok = wait_in_guest(g, f"[ $(wc -l </mnt/log) -ge {logged + 20} ]", 120)
    run.check("writes-go-on-after-the-switch", ok, f"{logged} lines before")
    run.check("background-work-stops", stop_loops(g, 3))
    v = values(g, f"""echo log=$(wc -l </mnt/log)
echo log_bad=$(awk 'NR - 1 != $1 {{ bad++ }} END {{ print bad + 0 }}' /mnt/log)
echo lists=$(wc -l </tmp/lists)
echo lists_bad=$(grep -cvx 100 /tmp/lists)
echo gone={held("gone")}
{DIGESTS}
rm /mnt/log
{USED}""", "checking after the switch")
    run.check("log-lines-consecutive", v["log_bad"] == "0" and int(v["log"]) > logged,
              f"{v['log']} lines ({logged} before the switch), {v['log_bad']} out of place")
    run.check("every-listing-right", v["lists_bad"] == "0",
              f"{v['lists']} listings, {v['lists_bad']} wrong")
    run.check("unlinked-open-file-reads", v["gone"] == before["gone"], v["gone"])
    run.check("old-files-right", (v["big"], v["small"]) == (before["big"], before["small"]))
    run.check("same-usage", v["used"] == before["used"],
              f"{before['used']} blocks before, {v['used']} after")
    out = g.check("mkdir /mnt/new && echo new >/mnt/d1/new && cat /mnt/d1/new && "
                  "ls /mnt/d1 | wc -l", "creating files")
    run.check("new-files", out.split() == ["new", "101"], " ".join(out.split()))


def share_tree(root: Path, lost: bool = False) -> dict[str, str]:
    """A shared directory: 100 small files, `big` (16 MiB), `held`; their md5s."""
    (root / "d0").mkdir(parents=True)
    for i in range(1, 101):
        (root / "d0" / f"f{i}").write_text(f"d0 file {i}\n")
    names = ["big", "held"] + (["lost"] if lost else [])
    for name, size in zip(names, (16 * MIB, 50000, 30000)):
        (root / name).write_bytes(os.urandom(size))
    small = hashlib.md5(b"".join((root / "d0" / f"f{i}").read_bytes()
                                 for i in sorted(range(1, 101), key=str))).hexdigest()
    return {"small": small, **{n: hashlib.md5((root / n).read_bytes()).hexdigest()
                               for n in names}}


SHARED_DIGESTS = ("echo big=$(md5sum </mnt/big | cut -d' ' -f1); "
                  "echo small=$(cat /mnt/d0/f* | md5sum | cut -d' ' -f1)")


def shared(run: Run, bed: Bed, virtiofsd: bool = False) -> None:
    """Scenario `shared`: find by path, with a reader and a held file across the switch."""
    share = bed.work / "share"
    want = share_tree(share)
    args = ["--shared-dir", str(share)]
    src_server = bed.server(args, virtiofsd)
    src = bed.vm(src_server)
    g = src.guest
    g.check(f"mount -t virtiofs fs /mnt\n{reader('/mnt/big')}\n{hold('held', '/mnt/held')}",
            "starting the background work")
    run.check("background-work-runs", wait_in_guest(g, "[ -s /tmp/reads ]", 300))
    reads = lines(g, "/tmp/reads")
    dst = bed.vm(bed.server(args, virtiofsd), incoming=True)
    if migrate(run, bed, src, dst, "migrates")["status"] != "completed":
        return
    source_server_ends(run, bed, src, src_server)
    g = dst.guest
    after_switch(run, g, reads, want["big"])
    run.check("background-work-stops", stop_loops(g, 1))
    v = values(g, f"echo held={held('held')}\n{SHARED_DIGESTS}", "checking after the switch")
    run.check("held-file-reads", v["held"] == want["held"], v["held"])
    run.check("files-right", (v["big"], v["small"]) == (want["big"], want["small"]))
    g.check("echo from-guest >/mnt/from-guest && sync", "writing in the guest")
    f = share / "from-guest"
    secs = until(lambda: f.is_file() and f.read_text() == "from-guest\n", 10)
    run.check("written-in-guest-seen-on-host", secs is not None)


def handles(run: Run, bed: Bed, virtiofsd: bool = False) -> None:
    """Scenario `handles`: a file unlinked while open moves by its file handle."""
    share = bed.work / "share"
    want = share_tree(share)
    args = ["--shared-dir", str(share), "--migration-mode", "file-handles"]
    src = bed.vm(bed.server(args, virtiofsd))
    g = src.guest
    g.check(f"mount -t virtiofs fs /mnt\n{hold('held', '/mnt/held', unlink=True)}",
            "holding an unlinked file")
    run.check("file-unlinked", wait_in_guest(g, "[ ! -e /mnt/held ]", 120))
    dst = bed.vm(bed.server(args, virtiofsd), incoming=True)
    if migrate(run, bed, src, dst, "migrates")["status"] != "completed":
        return
    bed.quit(src)
    v = values(dst.guest, f"echo held={held('held')}\n{SHARED_DIGESTS}", "checking")
    run.check("unlinked-open-file-reads", v["held"] == want["held"], v["held"])
    run.check("files-right", (v["big"], v["small"]) == (want["big"], want["small"]))


def stays(run: Run, vm: VM, script: str, want: dict[str, str], name: str) -> None:
    """After a failed migration: the source runs, its agent answers, the files are right."""
    status = vm.qmp.cmd("query-status").get("status")
    rc, out, _ = vm.guest.run(script, timeout=300)
    got = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    run.check(name, status == "running" and rc == 0 and got == want,
              f"source {status}, guest says {' '.join(out.split())[-200:]!r}")


def refused(run: Run, bed: Bed) -> None:
    """Scenario `refused`: a destination with other options refuses; a second one takes it."""
    src = bed.vm(bed.server([]))
    before = values(src.guest, f"mount -t virtiofs fs /mnt\n{SMALL}\n"
                               f"head -c {8 * MIB} /dev/urandom >/mnt/big\n{DIGESTS}",
                    "filling the mem filesystem")
    bad = bed.server(["-o", "noatime"])
    dst = bed.vm(bad, incoming=True)
    if migrate(run, bed, src, dst, "other-options-refused", want="failed")["status"] != "failed":
        return
    run.check("refusing-server-says-why",
              "start it with the options" in bad.log.read_text(errors="replace"),
              tail(bad.log, 300))
    stays(run, src, DIGESTS, before, "vm-runs-on-at-source")
    dst2 = bed.vm(bed.server([]), incoming=True)
    if migrate(run, bed, src, dst2, "then-migrates")["status"] != "completed":
        return
    bed.quit(src)
    run.check("files-right", values(dst2.guest, DIGESTS, "checking after the switch") == before)


def lost(run: Run, bed: Bed) -> None:
    """Scenario `lost`: the destination's copy lacks a file the guest holds."""
    a, b = bed.work / "a", bed.work / "b"
    want = share_tree(a, lost=True)
    shutil.copytree(a, b, symlinks=True)
    (b / "lost").unlink()
    src = bed.vm(bed.server(["--shared-dir", str(a)]))
    g = src.guest
    g.check(f"mount -t virtiofs fs /mnt\n{hold('lost', '/mnt/lost')}\ncat /mnt/d0/f1",
            "holding a file")
    check = f"echo lost={held('lost')}; {SHARED_DIGESTS}"
    server = bed.server(["--shared-dir", str(b)])
    dst = bed.vm(server, incoming=True)
    if migrate(run, bed, src, dst, "abort:missing-file-fails-the-migration",
                   want="failed")["status"] != "failed":
        return
    run.check("abort:destination-names-the-file", "lost" in tail(server.log, 100000),
              tail(server.log, 300))
    stays(run, src, check, {k: want[k] for k in ("lost", "big", "small")},
          "abort:vm-runs-on-at-source")
    try:
        server = bed.server(["--shared-dir", str(b), "--migration-on-error=guest-error"])
    except ServerError as e:
        run.check("guest-error:migrates", False, f"the destination server refused to start: {e}")
        return
    dst = bed.vm(server, incoming=True)
    if migrate(run, bed, src, dst, "guest-error:migrates")["status"] != "completed":
        return
    bed.quit(src)
    g = dst.guest
    rc, out, _ = g.run("cat </proc/$(cat /tmp/lost.pid)/fd/3 >/dev/null", timeout=300)
    run.check("guest-error:lost-file-fails", rc != 0 and "Input/output error" in out,
              out.strip()[-200:])
    v = values(g, SHARED_DIGESTS, "reading the other files")
    run.check("guest-error:other-files-right",
              (v["big"], v["small"]) == (want["big"], want["small"]))


def scenario(run: Run, env: Env, name: str, body, *args) -> None:
    only = os.environ.get("MEMOFS_VM_MIGRATE_ONLY")
    if only and name not in only.split(","):
        return
    run.part = f"{name}:"
    bed, failed = Bed(env, name), run.failed
    try:
        body(run, bed, *args)
    except (BenchError, OSError, subprocess.SubprocessError, QMPError, ServerError,
            KeyError, ValueError) as e:
        run.check("harness", False, f"{type(e).__name__}: {str(e)[-600:]}")
    finally:
        bed.end()
        panics = [s.log.name for s in bed.servers
                  if "panicked" in s.log.read_text(errors="replace")]
        if panics:
            run.check("no-server-panics", False, ", ".join(panics))
        bed.remove(keep_logs=run.failed > failed)


def one(kid: str, memofs: str) -> Run:
    run = Run("vm-migrate", kid)
    for tool in ("busybox", "cpio"):
        if not shutil.which(tool):
            run.cannot(f"{tool} is not installed (bash scripts/setup.sh installs it)")
            return run
    try:
        qemu = qemu10()
    except ToolMissing as e:
        run.cannot(str(e))
        return run
    try:
        k = kernel(kid)
    except BenchError as e:
        run.cannot(str(e))
        return run
    top = Path(tempfile.mkdtemp(prefix="memofs-vm-migrate-"))
    try:
        env = Env(memofs, qemu, k, initramfs(top / "initrd.cpio", {}, k),
                  os.environ.get("VIRTIOFSD") or shutil.which("virtiofsd"))
        scenario(run, env, "mem", mem)
        scenario(run, env, "mem-ahead", mem, True)
        scenario(run, env, "shared", shared)
        scenario(run, env, "handles", handles)
        scenario(run, env, "refused", refused)
        scenario(run, env, "lost", lost)
        if env.virtiofsd is None:
            print(f"SKIP vm-migrate-{kid} virtiofsd: not installed (neither $VIRTIOFSD nor "
                  "on PATH; cargo install virtiofsd)", flush=True)
            run.skipped += 1
        else:
            scenario(run, env, "virtiofsd-shared", shared, True)
            if os.geteuid() == 0:   # virtiofsd opens file handles as root only
                scenario(run, env, "virtiofsd-handles", handles, True)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    return run


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: scripts/vm/migrate-guest.py KERNEL-ID...", file=sys.stderr)
        return 2
    if "MEMOFS" not in os.environ:
        cargo = os.environ.get("CARGO", "cargo")
        subprocess.run([cargo, "build", "-q", "-p", "memofs"], cwd=TOP, check=True)
    binary = Path(os.environ.get("MEMOFS") or TOP / "target" / "debug" / "memofs")
    if not binary.is_file():
        print(f"migrate-guest.py: no {binary} (cargo build -p memofs)", file=sys.stderr)
        return 2
    failed = False
    with tempfile.TemporaryDirectory(prefix="memofs-vm-migrate-bin-") as tmp:
        # A copy: a rebuild during the run must not change the servers under it.
        memofs = shutil.copy(binary, Path(tmp) / "memofs")
        for kid in sys.argv[1:]:
            run = one(kid, memofs)
            print(run.summary(), flush=True)
            failed |= run.failed > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
