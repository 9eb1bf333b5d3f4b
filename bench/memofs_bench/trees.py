"""Trees as tarballs with a manifest, and the checks of a tree on a target.

A tree's digest is the SHA-256 of one line per regular file and symlink, sorted by path:
`path NUL kind NUL sha256(content or link target) LF`, kind being `x` (executable file),
`f` (other file) or `l` (symlink). Directories, owners and times are left out: git does not
keep them, and a checkout must give the digest of what was committed. The same digest is
computed from a tar archive (when the cached tarball is made) and from a directory (on the
target), so one number checks an untar or a checkout.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import stat
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .tools import CheckFailed

FORMAT = 1   # part of every derived file name: a change here makes them again


@dataclass
class Manifest:
    """What a tree holds: its digest, regular file sizes by path, and what checks need."""
    digest: str
    sizes: dict[str, int]            # regular files (and hard links): path -> size
    symlinks: int = 0
    dirs: int = 0
    grep: dict[str, int] = field(default_factory=dict)   # pattern -> matching lines
    git_tree: str | None = None      # `git write-tree` of the tree, when asked for

    @property
    def files(self) -> int:
        return len(self.sizes)

    @property
    def bytes(self) -> int:
        return sum(self.sizes.values())

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self), sort_keys=True))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "Manifest":
        return cls(**json.loads(path.read_text()))


class Digest:
    """Accumulates entries in any order; `hexdigest()` sorts them."""

    def __init__(self):
        self.entries: list[tuple[str, str, str]] = []

    def add(self, path: str, kind: str, data: bytes) -> None:
        self.entries.append((path, kind, hashlib.sha256(data).hexdigest()))

    def hexdigest(self) -> str:
        h = hashlib.sha256()
        for path, kind, d in sorted(self.entries):
            h.update(f"{path}\0{kind}\0{d}\n".encode("utf-8", "surrogateescape"))
        return h.hexdigest()


def count_lines(data: bytes, pattern: bytes) -> int:
    """Lines containing `pattern`, as `grep -a -F -c` counts them (LF-separated, the last line
    counted whether or not it ends in LF)."""
    if pattern not in data:
        return 0
    return sum(1 for line in data.split(b"\n") if pattern in line)


def _strip(name: str, n: int) -> str:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return "/".join(parts[n:])


def subset_cutoff(paths: Iterable[str], limit: int) -> str | None:
    """The largest path kept when keeping the `limit` smallest paths (None: keep all). Applied
    to both releases of a project, the same cutoff keeps the same part of each."""
    if limit <= 0:
        return None
    ps = sorted(paths)
    return ps[limit - 1] if len(ps) > limit else None


def repack(src: Path, dst: Path, strip: int = 0, cutoff: str | None = None,
           patterns: Iterable[str] = ()) -> Manifest:
    """Copy the tar archive `src` (any compression) to an uncompressed `dst`, dropping the first
    `strip` path components and every path after `cutoff`; returns the copy's manifest."""
    pats = list(patterns)
    m = Manifest(digest="", sizes={}, grep={p: 0 for p in pats})
    d = Digest()
    tmp = dst.with_name(dst.name + ".tmp")
    with tarfile.open(src, "r:*") as tin, tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tout:
        for member in tin:
            name = _strip(member.name, strip)
            if not name or (cutoff is not None and name > cutoff):
                continue
            data = None
            if member.isreg() or member.islnk():
                f = tin.extractfile(member)
                data = f.read() if f else b""
            out = copy.copy(member)
            out.name = name
            if member.islnk():
                out.linkname = _strip(member.linkname, strip)
            _record(m, d, out, data, pats)
            tout.addfile(out, None if member.islnk() or data is None else _Bytes(data))
    m.digest = d.hexdigest()
    os.replace(tmp, dst)
    return m


def pack_dir(src: Path, dst: Path, arcroot: str, keep: Callable[[str], bool] = lambda p: True,
             patterns: Iterable[str] = ()) -> Manifest:
    """Archive the directory `src` as `arcroot/...` into `dst` (sorted, modes and times kept,
    owner root); only top-level names for which `keep(name)` holds. Returns the manifest."""
    pats = list(patterns)
    m = Manifest(digest="", sizes={}, grep={p: 0 for p in pats})
    d = Digest()
    tmp = dst.with_name(dst.name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tout:
        for rel, full in _walk(src, keep):
            info = tout.gettarinfo(str(full), arcname=f"{arcroot}/{rel}" if rel else arcroot)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            data = full.read_bytes() if info.isreg() else None
            _record(m, d, info, data, pats)
            tout.addfile(info, None if data is None else _Bytes(data))
    m.digest = d.hexdigest()
    os.replace(tmp, dst)
    return m


def _walk(root: Path, keep: Callable[[str], bool]) -> Iterator[tuple[str, Path]]:
    yield "", root
    for top in sorted(os.listdir(root)):
        if not keep(top):
            continue
        yield top, root / top
        if (root / top).is_dir() and not (root / top).is_symlink():
            for dirpath, dirnames, filenames in os.walk(root / top):
                dirnames.sort()
                base = Path(dirpath)
                for n in sorted(dirnames + filenames):
                    yield str((base / n).relative_to(root)), base / n


class _Bytes:
    """A minimal file object over bytes for tarfile.addfile."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n is None or n < 0 else self.pos + n
        out = self.data[self.pos:end]
        self.pos += len(out)
        return out


def _record(m: Manifest, d: Digest, info: tarfile.TarInfo, data: bytes | None,
            patterns: list[str]) -> None:
    if info.isdir():
        m.dirs += 1
    elif info.issym():
        m.symlinks += 1
        d.add(info.name, "l", info.linkname.encode("utf-8", "surrogateescape"))
    elif data is not None:
        m.sizes[info.name] = len(data)
        d.add(info.name, "x" if info.mode & 0o100 else "f", data)
        for p in patterns:
            m.grep[p] += count_lines(data, p.encode())


def dir_manifest(root: Path, exclude: Iterable[str] = (), patterns: Iterable[str] = (),
                 prefix: str = "") -> Manifest:
    """The manifest of a directory as it is (e.g. on a target); top-level names in `exclude`
    are left out; paths are `prefix` + the path below root."""
    pats = list(patterns)
    m = Manifest(digest="", sizes={}, grep={p: 0 for p in pats})
    d = Digest()
    skip = set(exclude)
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root:
            dirnames[:] = [n for n in dirnames if n not in skip]
            filenames = [n for n in filenames if n not in skip]
        rel = os.path.relpath(dirpath, root)
        base = prefix + ("" if rel == "." else rel + "/")
        m.dirs += len(dirnames)
        for n in filenames + [x for x in dirnames if os.path.islink(os.path.join(dirpath, x))]:
            full = os.path.join(dirpath, n)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                m.symlinks += 1
                d.add(base + n, "l", os.fsencode(os.readlink(full)))
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    data = f.read()
                m.sizes[base + n] = len(data)
                d.add(base + n, "x" if st.st_mode & 0o100 else "f", data)
                for p in pats:
                    m.grep[p] += count_lines(data, p.encode())
    m.digest = d.hexdigest()
    return m


def check_same(what: str, want: Manifest, got: Manifest) -> None:
    """Raise CheckFailed naming the first differences if `got` is not the tree `want`."""
    if got.digest == want.digest:
        return
    missing = sorted(set(want.sizes) - set(got.sizes))
    extra = sorted(set(got.sizes) - set(want.sizes))
    resized = sorted(p for p in set(want.sizes) & set(got.sizes) if want.sizes[p] != got.sizes[p])
    detail = "; ".join(f"{label}: {', '.join(ps[:3])}{' ...' if len(ps) > 3 else ''} ({len(ps)})"
                       for label, ps in (("missing", missing), ("unexpected", extra),
                                         ("wrong size", resized)) if ps)
    raise CheckFailed(f"{what}: tree digest {got.digest[:12]} is not the expected "
                      f"{want.digest[:12]} ({got.files} files, expected {want.files}"
                      f"{'; ' + detail if detail else '; same names and sizes: content differs'})")


def parse_du(text: str, root: str) -> dict[str, int]:
    """`du -a -b ROOT` output -> {path below ROOT: apparent size}; ROOT itself is ''."""
    out: dict[str, int] = {}
    prefix = root.rstrip("/") + "/"
    for line in text.splitlines():
        size, _, path = line.partition("\t")
        if path == root.rstrip("/"):
            out[""] = int(size)
        elif path.startswith(prefix):
            out[path[len(prefix):]] = int(size)
    return out


def check_du(du: dict[str, int], want: Manifest, under: str = "") -> None:
    """Every regular file of `want` (paths below `under`) listed by du with its size."""
    bad = [p for p, size in want.sizes.items() if du.get(p[len(under):] if under else p) != size]
    if bad:
        raise CheckFailed(f"du: {len(bad)} of {want.files} files missing or with a wrong size "
                          f"(first: {bad[0]}: du {du.get(bad[0][len(under):])}, "
                          f"expected {want.sizes[bad[0]]})")
