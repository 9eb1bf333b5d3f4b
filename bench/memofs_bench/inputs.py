"""Real inputs: release archives pinned by exact version and SHA-256, fetched once with the
registries' own clients (pip for PyPI, cargo for crates.io) into the inputs cache, verified on
every use. Nothing here is fetched at benchmark time unless the cache lacks it.

The inputs cache is `$MEMOFS_BENCH_INPUTS`, else `<cache>/inputs` (see tools.cache_dir).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .tools import BenchError, ToolMissing, cache_dir, require


@dataclass(frozen=True)
class Pinned:
    """One archive: `kind` is `sdist` (PyPI source archive), `crate` (crates.io) or `wheel`."""
    kind: str
    name: str
    version: str
    filename: str
    sha256: str


# A large real source tree (44 722 files, 13 861 directories, 308 MB): Ansible's release
# sdist, every collection with its docs and tests.
ANSIBLE = Pinned("sdist", "ansible", "10.7.0", "ansible-10.7.0.tar.gz",
                 "59d29e3de1080e740dfa974517d455217601b16d16880314d9be26145c68dc22")
# Two releases of one project (about 6 900 files each) for a git history of two revisions.
DJANGO_A = Pinned("sdist", "django", "5.1.15", "django-5.1.15.tar.gz",
                  "46a356b5ff867bece73fc6365e081f21c569973403ee7e9b9a0316f27d0eb947")
DJANGO_B = Pinned("sdist", "django", "5.2.19", "django-5.2.19.tar.gz",
                  "ad03d8abc51dbff95ebf34b27123cf0c26a3b62db7ba0cd520783686362533d1")
# LuaJIT 2.1's full source tree with its own Makefile (the crate vendors it as luajit2/).
LUAJIT = Pinned("crate", "luajit-src", "210.7.4+c6ffc14", "luajit-src-210.7.4+c6ffc14.crate",
                "1db548b001f0b7da416daf0ffae963912bae6cad1799fa9f4eaba09da6dba837")
# A scientific Python package set (CPython 3.11, x86_64 manylinux wheels).
WHEELS = (
    Pinned("wheel", "numpy", "2.2.6",
           "numpy-2.2.6-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
           "ba10f8411898fc418a521833e014a77d3ca01c15b0c6cdcce6a0d2897e6dbbdf"),
    Pinned("wheel", "pandas", "2.2.3",
           "pandas-2.2.3-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
           "c124333816c3a9b03fbeef3a9f230ba9a737e9e5bb4060aa2107a86cc0a497fc"),
    Pinned("wheel", "scipy", "1.15.3",
           "scipy-1.15.3-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
           "39cb9c62e471b1bb3750066ecc3a3f3052b37751c7c3dfd0fd7e48900ed52982"),
    Pinned("wheel", "python-dateutil", "4.0.0", "python_dateutil-4.0.0-py3-none-any.whl",
           "a5e246f79eb80475e691bf93862cead98decd8a498cf53ba0516fcdc0f50dc1c"),
    Pinned("wheel", "pytz", "2026.6", "pytz-2026.6-py2.py3-none-any.whl",
           "7fed3fee8fd6bd4a2b7b75a8d56021d0624127bf69bd5691f115db929ac570b3"),
    Pinned("wheel", "tzdata", "2026.6", "tzdata-2026.6-py2.py3-none-any.whl",
           "0a10eec6e13ef16b627fabed9a5f2ba61a62b1c67f327305f4e7e412a70b4aec"),
)
WHEEL_PYTHON = (3, 11)


def inputs_dir() -> Path:
    d = os.environ.get("MEMOFS_BENCH_INPUTS")
    p = Path(d) if d else cache_dir() / "inputs"
    p.mkdir(parents=True, exist_ok=True)
    return p


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _verified(path: Path, pin: Pinned) -> bool:
    if not path.is_file():
        return False
    got = sha256_file(path)
    if got != pin.sha256:
        raise BenchError(f"{path}: SHA-256 {got} is not the pinned {pin.sha256} "
                         f"({pin.name} {pin.version}); delete it to fetch it again")
    return True


def _run(cmd: list[str], what: str, **kw) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-5:]
        raise BenchError(f"fetching {what} failed: `{' '.join(cmd)}` exited {r.returncode}: "
                         + " | ".join(tail))


def _requirements(pins, path: Path) -> Path:
    path.write_text("".join(f"{p.name}=={p.version} --hash=sha256:{p.sha256}\n" for p in pins))
    return path


def fetch(pin: Pinned, log=lambda s: None) -> Path:
    """The pinned archive in the inputs cache, downloaded first if missing; verified."""
    dest = inputs_dir() / "downloads" / pin.filename
    if _verified(dest, pin):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    log(f"fetching {pin.name} {pin.version}")
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        t = Path(tmp)
        if pin.kind == "crate":
            _fetch_crate(pin, t)
        else:
            binary = ["--only-binary", ":all:"] if pin.kind == "wheel" else ["--no-binary", ":all:"]
            _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *binary,
                  "--require-hashes", "-r", str(_requirements([pin], t / "req.txt")),
                  "-d", str(t)], f"{pin.name} {pin.version} from PyPI")
        got = t / pin.filename
        if not got.is_file():
            raise BenchError(f"fetching {pin.name} {pin.version} gave no {pin.filename} "
                             f"(got {', '.join(p.name for p in t.iterdir())})")
        os.replace(got, dest)
    if not _verified(dest, pin):
        raise BenchError(f"{dest} vanished after download")
    return dest


def _fetch_crate(pin: Pinned, tmp: Path) -> None:
    """cargo fetch of a one-dependency manifest, then the .crate from cargo's download cache
    (cargo checks it against the registry index's checksum)."""
    require("cargo", "install Rust (rustup) to fetch crates")
    (tmp / "src").mkdir()
    (tmp / "src" / "lib.rs").write_text("")
    (tmp / "Cargo.toml").write_text(
        '[package]\nname = "memofs-bench-fetch"\nversion = "0.0.0"\nedition = "2021"\n'
        f'[dependencies]\n{pin.name} = "={pin.version}"\n')
    _run(["cargo", "fetch", "--manifest-path", str(tmp / "Cargo.toml")],
         f"{pin.name} {pin.version} from crates.io", cwd=tmp)
    home = Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo")
    for crate in (home / "registry" / "cache").glob(f"*/{pin.filename}"):
        if sha256_file(crate) == pin.sha256:
            shutil.copyfile(crate, tmp / pin.filename)
            return
    raise BenchError(f"cargo fetched {pin.name} {pin.version}, but no {pin.filename} with the "
                     f"pinned SHA-256 is in {home / 'registry' / 'cache'}")


def python_set(log=lambda s: None) -> Path:
    """The pinned wheels installed (`pip install --target`, byte-compiled as pip does) into a
    staging folder of the inputs cache; returns the folder."""
    if sys.version_info[:2] != WHEEL_PYTHON:
        raise ToolMissing(f"the pinned wheels are for CPython {WHEEL_PYTHON[0]}.{WHEEL_PYTHON[1]};"
                          f" this is {sys.version.split()[0]} ({sys.executable})")
    wheels = [fetch(p, log) for p in WHEELS]
    stage = inputs_dir() / "pyset-v1"
    if (stage / ".complete").exists():
        return stage
    log("installing the Python package set into the cache")
    shutil.rmtree(stage, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        req = _requirements(WHEELS, Path(tmp) / "req.txt")
        _run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
              "--require-hashes", "--find-links", str(wheels[0].parent), "--target", str(stage),
              "-r", str(req)], "installing the Python package set")
    (stage / ".complete").write_text("")
    return stage
