#!/usr/bin/env python3
"""The pause `memofs upgrade` costs a process on the mount, for a mem mount holding FILES files
and DATA bytes (default 100 000 and 1 GiB), in each data mode: kernel-backed (root's
default) and the page store (passthrough=off). Per mode: UPGRADES upgrades (default 5); for
each, the pause the server measured (from stopping its request threads to the new
executable's first read) and the longest a loop of lookups on the mount waited during it.

Usage: bench/upgrade-pause.py [MEMOFS_BIN] (root; default target/release/memofs).
Environment: FILES, DATA (bytes), UPGRADES.
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def populate(mnt, files, data):
    per_dir = 1000
    for d in range(files // per_dir):
        sub = os.path.join(mnt, f"d{d}")
        os.mkdir(sub)
        for i in range(per_dir):
            fd = os.open(os.path.join(sub, f"f{i}"), os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, b"x" * (i % 64))
            os.close(fd)
    chunk = os.urandom(1 << 20)
    with open(os.path.join(mnt, "data"), "wb") as f:
        for _ in range(data >> 20):
            f.write(chunk)


class Watcher(threading.Thread):
    """Looks up a new name in a loop (each a LOOKUP the server answers: no cache holds a
    name never asked for); remembers the longest lookup."""

    def __init__(self, mnt):
        super().__init__(daemon=True)
        self.mnt, self.longest, self.stop, self.n = mnt, 0.0, False, 0

    def run(self):
        while not self.stop:
            self.n += 1
            t = time.monotonic()
            os.path.exists(os.path.join(self.mnt, f"missing-{self.n}"))
            self.longest = max(self.longest, time.monotonic() - t)


def mode(bin_, name, opts, files, data, upgrades):
    with tempfile.TemporaryDirectory(prefix="memofs-upgrade-pause.") as work:
        mnt = os.path.join(work, "mnt")
        os.mkdir(mnt)
        subprocess.run([bin_, "mount", "-o", opts, mnt], check=True)
        try:
            t = time.monotonic()
            populate(mnt, files, data)
            made = time.monotonic() - t
            pauses, stalls = [], []
            for _ in range(upgrades):
                w = Watcher(mnt)
                w.start()
                time.sleep(0.2)
                out = subprocess.run([bin_, "upgrade", mnt], check=True, capture_output=True,
                                     text=True).stdout
                time.sleep(0.2)
                w.stop = True
                w.join()
                pauses.append(float(re.search(r"waited ([0-9.]+) ms", out).group(1)))
                stalls.append(w.longest * 1000)
            state = re.search(r"of (\d+) bytes of state", out).group(1)
            print(f"{name}: {files} files, {data >> 20} MiB (made in {made:.0f} s); "
                  f"state {int(state) / 1e6:.1f} MB; server-measured pause median "
                  f"{statistics.median(pauses):.1f} ms, max {max(pauses):.1f} ms; longest lookup "
                  f"median {statistics.median(stalls):.1f} ms, max {max(stalls):.1f} ms")
        finally:
            subprocess.run([bin_, "umount", mnt])


def main():
    bin_ = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else "target/release/memofs")
    files = int(os.environ.get("FILES", 100_000))
    data = int(os.environ.get("DATA", 1 << 30))
    upgrades = int(os.environ.get("UPGRADES", 5))
    size = f"size={data * 2 + (1 << 30)}"
    mode(bin_, "kernel-backed", size, files, data, upgrades)
    mode(bin_, "page store", f"{size},passthrough=off", files, data, upgrades)


if __name__ == "__main__":
    main()
