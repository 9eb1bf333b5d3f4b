"""create: creating and deleting many empty files in one directory, as a build or an unpack
does with its small outputs; each file costs the kernel's own requests (a LOOKUP of the new
name, CREATE, RELEASE, then UNLINK), so this measures the request path, not data.

A C helper creates N empty files (open O_CREAT|O_EXCL, close) in a fresh directory, then
unlinks them in the same order; the rates are files per second of each phase.
"""

from __future__ import annotations

from .. import tools
from . import Context, Metric, Param, Part, Workload


def create(ctx: Context):
    exe = str(tools.helper("create_unlink"))
    d = ctx.mnt / "create"
    n = ctx.int("files")
    for rnd in range(ctx.int("loops")):
        d.mkdir()
        ctx.status(f"create/unlink {n} files ({rnd + 1})")
        r = ctx.run([exe, str(d), str(n)], timeout=900)
        d.rmdir()
        made, gone = (float(x) for x in r.stdout.split())
        yield "create", str(n), n / made
        yield "unlink", str(n), n / gone


WORKLOAD = Workload(
    name="create",
    summary="create then unlink N empty files in one directory (files/s of each phase)",
    seed="(none: the request path of small-file work)",
    params=[
        Param("files", "100000", "1000", "files created, then unlinked"),
        Param("loops", "1", "1", "create+unlink rounds per mount"),
    ],
    metrics=[Metric("create", "empty files created", "files/s", True, "files", "Files"),
             Metric("unlink", "files unlinked", "files/s", True, "files", "Files")],
    parts=[Part("create_unlink", ("create", "unlink"), create, (),
                lambda p: [p["files"]])],
)
