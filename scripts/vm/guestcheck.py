"""What the guest check scripts (dfs-guest.py, labels-guest.py) share: a run's PASS, FAIL
and SKIP lines and its summary, the tools a guest needs, and waiting for a condition.

A guest or bed that cannot run here is skipped, or a failure with MEMOFS_VM_REQUIRED=1.
"""

from __future__ import annotations

import os
import shutil
import time

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


def until(cond, limit: float) -> float | None:
    """Seconds until `cond()` held, or None if it did not within `limit`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.05)
    return None
