"""Hostile tar archives and the check that an extraction stayed in its destination :
shared by the sandbox backends' download tests."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

SECRET = b"SECRET host file"


def tar_of(*entries: tuple[str, bytes, str | bytes]) -> bytes:
    """A tar of (name, type, linkname or data) entries, in that order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, extra in entries:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                data = extra if isinstance(extra, bytes) else extra.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.linkname = str(extra)
                if kind == tarfile.CHRTYPE:
                    info.devmajor, info.devminor = 1, 3
                tar.addfile(info)
    return buf.getvalue()


D, F, S, H = tarfile.DIRTYPE, tarfile.REGTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE


def realpath_chain(escape_to: str, *, real_names: bool, root: str = "") -> bytes:
    """Sixteen directories of 247-character names, each reachable through a one-letter link;
    a link at the bottom climbing back to the top; `escape` through all of it and then out
    (`escape_to`, relative to the destination); a file written through `escape`. Resolving
    `escape` needs more than PATH_MAX, where Python 3.11.7's realpath stops resolving and
    tarfile's data filter takes the rest of the name at face value."""
    long, letters = "d" * 247, "abcdefghijklmnop"
    entries: list[tuple[str, bytes, str | bytes]] = [(root, D, "")] if root else []
    deep = root
    for ch in letters:
        entries.append((deep + long, D, ""))
        entries.append((deep + ch, S, long))
        deep += long + "/"
    short = "/".join(letters)
    bottom = (deep if real_names else root + short + "/") + "l" * 254
    entries.append((bottom, S, "../" * len(letters)))
    entries.append((root + "escape", S, f"{short}/{'l' * 254}/{escape_to}"))
    entries.append((root + "escape/pwned.txt", F, "pwned"))
    return tar_of(*entries)


def assert_contained(dest: Path, outside: Path) -> None:
    """Nothing was written outside `dest`, and no name below `dest` leads (for the kernel)
    to anything but `dest`'s own files and directories. Walked through directory
    descriptors: the chain's paths are longer than PATH_MAX."""
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_bytes() == SECRET
    own: set[tuple[int, int]] = set()
    names: list[tuple[int, str]] = []  # (directory descriptor, name)
    fds = [os.open(dest, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        todo = [fds[0]]
        while todo:
            fd = todo.pop()
            st = os.fstat(fd)
            own.add((st.st_dev, st.st_ino))
            for name in os.listdir(fd):
                names.append((fd, name))
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    fds.append(os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                       dir_fd=fd))
                    todo.append(fds[-1])
                elif not stat.S_ISLNK(st.st_mode):
                    own.add((st.st_dev, st.st_ino))
        for fd, name in names:
            try:  # following every link, as a reader of `dest` would
                st = os.stat(name, dir_fd=fd)
            except OSError:
                continue  # dangling, a loop, too long: leads nowhere
            assert (st.st_dev, st.st_ino) in own, f"{name!r} leads out of {dest}"
            if stat.S_ISREG(st.st_mode):
                f = os.open(name, os.O_RDONLY, dir_fd=fd)
                try:
                    assert SECRET not in os.read(f, 1 << 20)
                finally:
                    os.close(f)
    finally:
        for fd in fds:
            os.close(fd)
