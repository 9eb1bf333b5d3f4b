"""libfuse's passthrough_hp, built with FUSE-over-io_uring from Debian's source package.

The anchor for memofs's FUSE-over-io_uring transport is libfuse's own (`passthrough_hp -o
io_uring`, libfuse 3.18 or later). Debian 12 ships libfuse 3.14, and the newer binary packages
need a newer C library and are built without liburing, so the harness builds libfuse from the
source package of Debian's unstable suite instead: downloaded with `apt-get source
--download-only` through a private apt configuration under the cache (the host's own sources
are never read or changed; apt checks the files against the signed index), unpacked, built
with meson and ninja as a static library with io_uring, and only `example/passthrough_hp`
kept. Nothing of libfuse is committed to this repository.

Cache: <cache>/libfuse/VERSION/passthrough_hp; apt/ beside it holds the private lists.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from .tools import BenchError, ToolMissing, cache_dir, require

# The source package pinned here: the first libfuse release line with FUSE-over-io_uring is
# 3.18. When the archive drops this version, pin the one `apt-cache showsrc fuse3` lists.
PACKAGE, VERSION = "fuse3", "3.18.3-1"
UPSTREAM = VERSION.rsplit("-", 1)[0]
SOURCES = ("deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
           "http://deb.debian.org/debian sid main\n")
# Debian 12 packages that building it needs (liburing and libnuma: its io_uring support)
BUILD_NEEDS = {"meson": "meson", "ninja": "ninja-build", "c++": "g++"}
HEADERS = {"liburing.h": "liburing-dev", "numa.h": "libnuma-dev"}


def _apt_options(apt: Path) -> list[str]:
    return ["-o", f"Dir::Etc::SourceList={apt}/sources.list",
            "-o", "Dir::Etc::SourceParts=/dev/null", "-o", "Dir::Etc::Preferences=/dev/null",
            "-o", "Dir::Etc::PreferencesParts=/dev/null", "-o", f"Dir::State::Lists={apt}/lists",
            "-o", f"Dir::State::Status={apt}/status", "-o", f"Dir::Cache={apt}/cache",
            "-o", "Debug::NoLocking=1", "-o", "Acquire::Languages=none",
            "-o", "APT::Sandbox::User=root", "-o", "quiet=1"]


def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip()[-800:]
        raise BenchError(f"{what} failed (`{' '.join(cmd[:3])} ...` exited {r.returncode}): "
                         f"{tail or '(no output)'}")
    return r


def _download(apt: Path, into: Path) -> Path:
    """The upstream tarball of PACKAGE=VERSION, downloaded and checked by apt."""
    require("apt-get", "a Debian host is needed to fetch libfuse's source package")
    for d in ("lists/partial", "cache/archives/partial"):
        (apt / d).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(SOURCES)
    (apt / "status").touch()
    opts = _apt_options(apt)
    spec = f"{PACKAGE}={VERSION}"
    if subprocess.run(["apt-cache", *opts, "showsrc", spec], capture_output=True,
                      text=True).stdout.find(f"Version: {VERSION}") < 0:
        try:
            _run(["apt-get", *opts, "update"], "apt-get update of the private source lists")
        except BenchError as e:
            raise ToolMissing(f"cannot reach Debian's archive for libfuse's source: {e}") from e
    try:
        _run(["apt-get", *opts, "source", "--download-only", spec],
             f"apt-get source {spec}", cwd=into)
    except BenchError as e:
        raise ToolMissing(f"cannot download libfuse's source package {spec} (pin another "
                          f"VERSION in {Path(__file__).name}): {e}") from e
    tarball = into / f"{PACKAGE}_{UPSTREAM}.orig.tar.gz"
    if not tarball.is_file():
        raise BenchError(f"apt-get source {spec} left no {tarball.name}")
    return tarball


def _check_build_needs() -> None:
    for tool, pkg in BUILD_NEEDS.items():
        require(tool, f"apt-get install {pkg}")
    for header, pkg in HEADERS.items():
        if not Path("/usr/include", header).is_file():
            raise ToolMissing(f"{header} is missing (libfuse's io_uring support needs it): "
                              f"apt-get install {pkg}")


def passthrough_hp() -> Path:
    """The path of passthrough_hp from libfuse VERSION with io_uring, built on first use."""
    home = cache_dir() / "libfuse" / VERSION
    exe = home / "passthrough_hp"
    if exe.is_file():
        return exe
    _check_build_needs()
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="libfuse-", dir=home) as tmp:
        work = Path(tmp)
        _run(["tar", "-xzf", str(_download(home / "apt", work)), "-C", str(work)],
             "unpacking libfuse's source")
        src = work / f"fuse-{UPSTREAM}"
        build = src / "build"
        _run(["meson", "setup", str(build), "--buildtype=release", "-Ddefault_library=static",
              "-Dexamples=true", "-Dutils=false", "-Dtests=false", "-Denable-io-uring=true"],
             "meson setup of libfuse", cwd=src)
        if "#define HAVE_URING" not in (build / "fuse_config.h").read_text():
            raise BenchError("libfuse was configured without io_uring (meson found no usable "
                             "liburing with SQE128 or no libnuma): see "
                             f"{build}/meson-logs/meson-log.txt")
        _run(["ninja", "-C", str(build), "example/passthrough_hp"], "building passthrough_hp")
        tmp_exe = exe.with_name(exe.name + ".tmp")
        shutil.copy2(build / "example" / "passthrough_hp", tmp_exe)
        tmp_exe.replace(exe)
    return exe
