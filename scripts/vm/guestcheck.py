"""What the guest check scripts (dfs-guest.py, labels-guest.py) share: a run's PASS, FAIL
and SKIP lines and its summary, the tools and kernel a guest needs, waiting for a
condition, and the command line. The scripts put bench/ on the module path first.

A guest or bed that cannot run here is skipped, or a failure with MEMOFS_VM_REQUIRED=1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from memofs_bench.tools import until  # noqa: F401 (the scripts' waits, from here)

REQUIRED = os.environ.get("MEMOFS_VM_REQUIRED") == "1"


class Run:
    """The checks of one script on one guest kernel, printed as `WORD LABEL-KID PART NAME`."""

    def __init__(self, label: str, kid: str):
        self.label, self.kid = label, kid
        self.passed, self.failed, self.skipped = 0, 0, 0
        # What the checks are of now (an engine, a server), printed before each name.
        self.part = ""

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        word = "PASS" if ok else "FAIL"
        print(f"{word} {self.label}-{self.kid} {self.part}{name}"
              f"{' (' + detail + ')' if detail else ''}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1

    def cannot(self, why: str) -> None:
        word = "FAIL" if REQUIRED else "SKIP"
        print(f"{word} {self.label}-{self.kid} {self.part}cannot run here: {why}", flush=True)
        if REQUIRED:
            self.failed += 1
        else:
            self.skipped += 1

    def has_guest_tools(self) -> bool:
        """Whether what boots a guest is installed (else says so, as [`Run.cannot`])."""
        for tool in ("qemu-system-x86_64", "busybox", "cpio"):
            if not shutil.which(tool):
                self.cannot(f"{tool} is not installed (bash scripts/setup.sh installs it)")
                return False
        return True

    def summary(self) -> str:
        return (f"{self.label}-{self.kid}: {self.passed} passed, {self.failed} failed, "
                f"{self.skipped} skipped")


def begin(label: str, kid: str):
    """A run of `label` on kernel `kid`, and the kernel (memofs_bench.vm's, fetched once);
    None for the kernel where no guest can run here (the run says why)."""
    from memofs_bench.tools import BenchError
    from memofs_bench.vm import kernel
    run = Run(label, kid)
    if not run.has_guest_tools():
        return run, None
    try:
        return run, kernel(kid)
    except BenchError as e:
        run.cannot(str(e))
        return run, None


def main(script: str, one: Callable[[str, str], Run]) -> int:
    """A check script's command line: builds memofs, runs `one(kernel id, memofs binary)`
    for each kernel id given, prints each run's summary; 1 if anything failed, 2 for no
    kernel."""
    if len(sys.argv) < 2:
        print(f"usage: scripts/vm/{script} KERNEL-ID...", file=sys.stderr)
        return 2
    top = Path(__file__).resolve().parents[2]
    cargo = os.environ.get("CARGO", "cargo")
    subprocess.run([cargo, "build", "-q", "-p", "memofs"], cwd=top, check=True)
    failed = False
    for kid in sys.argv[1:]:
        run = one(kid, str(top / "target" / "debug" / "memofs"))
        print(run.summary(), flush=True)
        failed |= run.failed > 0
    return 1 if failed else 0
