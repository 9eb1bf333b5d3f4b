"""A small QMP client (QEMU's JSON monitor on a unix socket, `-qmp unix:PATH,server=on,wait=off`)
and a live migration driven through two of them, for the live-migration test
(scripts/vm/migrate-guest.py) and the migrate family.

QMP sends one JSON object per line: a greeting, then for each command either `return` or
`error`, with asynchronous `event`s in between (kept in `events`, never waited for).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

# What query-migrate says once a migration has ended.
ENDED = ("completed", "failed", "cancelled")


class QMPError(Exception):
    pass


class QMP:
    """A QMP connection to the QEMU listening at `path`, connected within `timeout` s."""

    def __init__(self, path: Path, timeout: float = 30.0, alive=lambda: True):
        self.events: list[dict] = []
        self.buf = b""
        deadline = time.monotonic() + timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(str(path))
                break
            except OSError as e:
                s.close()
                if time.monotonic() > deadline or not alive():
                    raise QMPError(f"no QMP socket at {path}: {e}") from None
                time.sleep(0.05)
        self.sock = s
        greeting = self._read(timeout)
        if "QMP" not in greeting:
            raise QMPError(f"not a QMP greeting: {greeting}")
        self.cmd("qmp_capabilities")

    def _read(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise QMPError(f"QMP: no answer within {timeout:.0f} s")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                raise QMPError("QMP: QEMU closed the connection")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def cmd(self, name: str, timeout: float = 30.0, **args) -> object:
        """`name`'s `return`, or QMPError with QEMU's `error`."""
        msg = {"execute": name, **({"arguments": args} if args else {})}
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            answer = self._read(timeout)
            if "event" in answer:
                self.events.append(answer)
            elif "error" in answer:
                e = answer["error"]
                raise QMPError(f"{name}: {e.get('class')}: {e.get('desc')}")
            elif "return" in answer:
                return answer["return"]

    def quit(self) -> None:
        """Ends QEMU (`quit`); its closing the connection first is no error."""
        try:
            self.cmd("quit")
        except (QMPError, OSError):
            pass
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def blockers(q: QMP) -> list[str]:
    """What keeps this QEMU from migrating (query-migrate's `blocked-reasons`)."""
    return list(q.cmd("query-migrate").get("blocked-reasons", []))


def migrate(src: QMP, dst: QMP, uri: str, timeout: float = 300.0) -> dict:
    """Migrates the VM of `src` to `dst` (started with `-incoming defer`) through `uri`; the
    source's last query-migrate, once the migration ended (status completed or failed), or
    with status `timeout` (then cancelled)."""
    # QEMU's default (128 MiB/s) would throttle a copy over a unix socket on this host.
    src.cmd("migrate-set-parameters", **{"max-bandwidth": 8 << 30})
    dst.cmd("migrate-incoming", uri=uri)
    src.cmd("migrate", uri=uri)
    deadline = time.monotonic() + timeout
    while True:
        info = src.cmd("query-migrate")
        if info.get("status") in ENDED:
            return info
        if time.monotonic() > deadline:
            src.cmd("migrate_cancel")
            return {**info, "status": "timeout"}
        time.sleep(0.05)


def figures(info: dict) -> str:
    """A migration's downtime and total time, as query-migrate gives them."""
    return f"downtime {info.get('downtime', '?')} ms, total {info.get('total-time', '?')} ms"
