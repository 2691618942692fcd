"""Extract an archive a sandbox produced onto the host, never trusting it.

Every backend's `download()` ends here: the bytes came from inside a sandbox, where the agent's
code may have written the tree, replaced the guest that tarred it, or (E2B, root images)
produced the archive itself. So this module:

- parses the tar itself (`read_tar`: ustar, pax and GNU long names; nothing else) instead of
  `tarfile`: Python 3.11.7's reader has a ReDoS in its pax header parsing (CVE-2024-6232) and
  its `data` filter is bypassed by a symlink chain that pushes `realpath` past PATH_MAX
  (CVE-2025-4517); neither `tarfile`'s extraction nor its filters ever see a hostile archive;
- writes one name at a time below directory descriptors opened with O_NOFOLLOW, creating files
  with O_EXCL after removing what is in the way: nothing is ever written through a link,
  whatever the archive's order (a symlink, then a file through it: the file is refused);
- refuses absolute names and names with `..`; hard links only to regular files this archive
  made; device nodes, FIFOs (a reader of `dest` would block on one) and sparse members;
- keeps a symlink only when resolving it *within the extracted tree* (following the archive's
  other symlinks, with the kernel's 40-link limit) never leaves the tree: a link to
  `/etc/shadow`, to `../x`, or through another link's `..` is left out, so reading `dest`
  later never reads a host file outside it. Names the archive does not hold are taken as
  plain directories (what was in `dest` before is the host's own);
- never keeps an owner, setuid/setgid/sticky bits or group/other write bits.

Left-out members are logged (one warning per download), never raised: a sandbox's content is
the agent's, and a planted link must not turn a download into an error the agent chose.

Over ~400 lines, for a reason: one job, a hostile archive onto the host: the tar reader, the
resolver of its links and the writer rely on each other's checks, so they are audited in one
place.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

BLOCK = 512
MAX_LINK_NAME = 4096       # a symlink target longer than PATH_MAX is left out
MAX_SYMLINK_HOPS = 40      # as the kernel's ELOOP limit
MAX_RESOLVE_STEPS = 2_000_000  # path components walked for all of an archive's symlinks
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
REG, HARD, SYM, DIR, OTHER = "reg", "hard", "sym", "dir", "other"


@dataclass
class Member:
    """One archive entry: `kind` is REG, HARD, SYM, DIR or OTHER; a REG's data is
    `data[offset:offset + size]` of the archive."""

    name: str
    kind: str
    mode: int
    mtime: int
    size: int
    offset: int
    linkname: str = ""


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _number(field: bytes) -> int:
    """A header number: octal ASCII, or GNU's base-256 (first byte's high bit set)."""
    if field and field[0] & 0x80:
        n = int.from_bytes(field[1:], "big")
        return -n if field[0] & 0x40 else n  # 0xff: negative (a pre-1970 mtime)
    digits = field.split(b"\0", 1)[0].strip(b" \0")
    if not digits:
        return 0
    if len(digits) > 24 or not all(48 <= c <= 55 for c in digits):
        raise ValueError(f"bad number field {field!r}")
    return int(digits, 8)


def _pax(buf: bytes) -> dict[str, str]:
    """pax extended header records (`LEN KEY=VALUE\\n`), parsed without regular expressions;
    parsing stops at the first malformed record."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(buf):
        space = buf.find(b" ", pos, pos + 21)
        if space < 0 or not buf[pos:space].isdigit():
            break
        length = int(buf[pos:space])
        end = pos + length
        if length <= space - pos + 1 or end > len(buf) or buf[end - 1:end] != b"\n":
            break
        key, sep, value = buf[space + 1:end - 1].partition(b"=")
        if sep:
            out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8",
                                                                        "surrogateescape")
        pos = end
    return out


def read_tar(data: bytes) -> tuple[list[Member], list[str]]:
    """The members of an uncompressed tar, and what was wrong with it (a bad checksum or a
    truncated member ends the listing there; what came before is kept)."""
    members: list[Member] = []
    problems: list[str] = []
    pos, pax, long_name, long_link = 0, {}, None, None
    while pos + BLOCK <= len(data):
        header = data[pos:pos + BLOCK]
        if header.count(0) == BLOCK:
            break  # end of archive
        try:
            checksum = _number(header[148:156])
            size = _number(header[124:136])
            if size < 0:
                raise ValueError("negative size")
        except ValueError as e:
            problems.append(f"unreadable header at byte {pos}: {e}")
            break
        if checksum != sum(header[:148]) + 256 + sum(header[156:]) and checksum != sum(
                b - 256 if b > 127 else b for b in header[:148] + header[156:]) + 256:
            problems.append(f"bad header checksum at byte {pos}")  # (or signed, as old tars)
            break
        flag = header[156:157]
        start = pos + BLOCK
        if "size" in pax and flag not in (b"x", b"g", b"L", b"K"):
            try:
                size = int(pax["size"])
            except ValueError:
                size = -1
            if size < 0:
                problems.append(f"bad pax size at byte {pos}")
                break
        if start + size > len(data):
            problems.append(f"member at byte {pos} is truncated")
            break
        pos = start + (size + BLOCK - 1) // BLOCK * BLOCK
        body = data[start:start + size]
        if flag == b"x":
            pax = _pax(body)
            continue
        if flag == b"g":  # global defaults: nothing we use
            continue
        if flag == b"L":
            long_name = _text(body)
            continue
        if flag == b"K":
            long_link = _text(body)
            continue
        name = _text(header[0:100])
        if header[257:263] == b"ustar\0" and header[345] != 0:  # POSIX ustar's prefix field
            name = _text(header[345:500]) + "/" + name
        name = pax.get("path", long_name if long_name is not None else name)
        link = pax.get("linkpath", long_link if long_link is not None else _text(header[157:257]))
        kind = {b"0": REG, b"\0": REG, b"7": REG, b"1": HARD, b"2": SYM,
                b"5": DIR}.get(flag, OTHER)
        if kind == REG and name.endswith("/"):
            kind = DIR  # old tars mark directories by the trailing slash only
        try:
            mode, mtime = _number(header[100:108]) & 0o7777, _number(header[136:148])
        except ValueError:
            mode, mtime = 0o644, 0
        if "GNU.sparse.major" in pax or "GNU.sparse.size" in pax or "GNU.sparse.map" in pax:
            kind = OTHER  # its data says how large a file to make: not from a sandbox
        members.append(Member(name, kind, mode, mtime, size, start, link))
        pax, long_name, long_link = {}, None, None
    return members, problems


def _parts(name: str) -> tuple[str, ...] | None:
    """A member name as components below the destination; None for an absolute name, one
    with `..`, or one holding a NUL byte."""
    if name.startswith("/") or "\0" in name:
        return None
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    return None if ".." in parts else parts


class _Resolver:
    """Whether a symlink of the extracted tree resolves inside it, following the tree's own
    symlinks the way the kernel would; work bounded by `MAX_RESOLVE_STEPS` for the archive."""

    def __init__(self, links: dict[tuple[str, ...], str]) -> None:
        self.links = links
        self.budget = MAX_RESOLVE_STEPS

    def stays_inside(self, where: tuple[str, ...], target: str) -> bool:
        if not target or target.startswith("/") or len(target) > MAX_LINK_NAME:
            return False
        cur, todo, hops = list(where[:-1]), target.split("/")[::-1], 0
        while todo:
            self.budget -= 1
            if self.budget < 0:
                return False
            name = todo.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if not cur:
                    return False
                cur.pop()
                continue
            nxt = (*cur, name)
            link = self.links.get(nxt)
            if link is None:
                cur.append(name)
                continue
            hops += 1
            if hops > MAX_SYMLINK_HOPS or link.startswith("/") or len(link) > MAX_LINK_NAME:
                return False
            todo.extend(link.split("/")[::-1])
        return True


def extract(data: bytes, dest: str | Path, *, prefix: str = ".", name: str | None = None
            ) -> list[str]:
    """Extract a sandbox's tar of one path into the host directory `dest` (made if missing)
    and return the names left out (also logged). Members are those named `prefix` or
    `prefix/...`: when the member `prefix` itself is a file or a link, it lands as
    `dest/<name>`; a directory's contents land in `dest`."""
    members, problems = read_tar(data)
    base = _parts(prefix) or ()
    top = next((m for m in members if _parts(m.name) == base), None)
    into: tuple[str, ...] = (name,) if name and top is not None and top.kind != DIR else ()
    if into and _parts(name or "") != into:
        raise ValueError(f"{name!r} is not a plain file name")
    skipped = list(problems)
    placed: list[tuple[tuple[str, ...], Member]] = []
    for m in members:
        parts = _parts(m.name)
        if parts is None:
            skipped.append(f"{m.name!r} (absolute or with '..')")
            continue
        if parts[:len(base)] != base:
            skipped.append(f"{m.name!r} (outside {prefix!r})")
            continue
        parts = into + parts[len(base):]
        if parts:  # not `dest` itself
            placed.append((parts, m))
    os.makedirs(dest, exist_ok=True)
    _Writer(os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), data, skipped
            ).run(placed)
    if skipped:
        shown = ", ".join(skipped[:10]) + (f" and {len(skipped) - 10} more"
                                           if len(skipped) > 10 else "")
        log.warning("download into %s: left out %d member(s) that are unsafe on the host "
                    "(links leaving the tree, special files, names outside it): %s",
                    dest, len(skipped), shown)
    return skipped


class _Writer:
    """Makes the members below the descriptor `top` (closed by `run`), in two phases:
    everything but symlinks, in the archive's order; then the symlinks that end the archive
    at their name, each checked against all of those (the tree's final links: a link that a
    later member replaces can change where an earlier one leads)."""

    def __init__(self, top: int, data: bytes, skipped: list[str]) -> None:
        self.top, self.data, self.skipped = top, data, skipped
        self.files: set[tuple[str, ...]] = set()  # regular files made here: hard link targets
        self.dir_modes: dict[tuple[str, ...], int] = {}

    def run(self, placed: list[tuple[tuple[str, ...], Member]]) -> None:
        try:
            last = {parts: m for parts, m in placed}
            for parts, m in placed:
                if m.kind != SYM:
                    self._try(m, lambda p=parts, m=m: self._member(p, m))
            links: dict[tuple[str, ...], Member] = {}
            for parts, m in last.items():
                if m.kind != SYM:
                    continue
                if any(parts[:i] in last and last[parts[:i]].kind == SYM
                       for i in range(1, len(parts))):
                    self.skipped.append(f"{m.name!r} (below another link)")
                elif not self._free(parts):
                    self.skipped.append(f"{m.name!r} (a directory, or a file where one of "
                                        "its directories goes, is in the way)")
                else:
                    links[parts] = m
            resolver = _Resolver({p: m.linkname for p, m in links.items()})
            for parts, m in links.items():
                if resolver.stays_inside(parts, m.linkname):
                    self._try(m, lambda p=parts, m=m: self._link(p, m))
                else:
                    self.skipped.append(f"{m.name!r} (a link leaving the tree: "
                                        f"-> {m.linkname[:200]!r})")
            for parts, mode in sorted(self.dir_modes.items(), key=lambda kv: -len(kv[0])):
                fd = self._dir(parts, create=False)
                if fd is not None:
                    try:
                        os.fchmod(fd, mode)
                    finally:
                        os.close(fd)
        finally:
            os.close(self.top)

    def _try(self, m: Member, make: Any) -> None:
        try:
            why = make()
        except OSError as e:
            why = f"{e.strerror or e}"
        except ValueError as e:  # e.g. an embedded NUL the OS refuses
            why = str(e)
        if why:
            self.skipped.append(f"{m.name!r} ({why})")

    def _dir(self, parts: tuple[str, ...], create: bool) -> int | None:
        """A descriptor of the directory `parts` (made if `create`), or None when one of its
        names is not a directory (a symlink or a file: never entered) or is missing."""
        fd = os.dup(self.top)
        try:
            for part in parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o700, dir_fd=fd)
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        os.close(fd)
                        return None
                    raise
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _free(self, parts: tuple[str, ...]) -> bool:
        """Whether a link can be made at `parts`: each directory on the way is one or is
        missing (then made), and the name itself is not a directory."""
        fd = os.dup(self.top)
        try:
            for i, part in enumerate(parts):
                try:
                    st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    return True
                if i == len(parts) - 1:
                    return not stat.S_ISDIR(st.st_mode)
                if not stat.S_ISDIR(st.st_mode):
                    return False
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nfd
            return True
        finally:
            os.close(fd)

    def _clear_name(self, pfd: int, name: str) -> str | None:
        """Remove a non-directory at `name` (never follows it); why not, if a directory."""
        try:
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            return "a directory is in the way"
        os.unlink(name, dir_fd=pfd)
        return None

    def _link(self, parts: tuple[str, ...], m: Member) -> str | None:
        pfd = self._dir(parts[:-1], create=True)
        if pfd is None:
            return "a link or a file is where its directory goes"
        try:
            why = self._clear_name(pfd, parts[-1])
            if why:
                return why
            self.files.discard(parts)
            os.symlink(m.linkname, parts[-1], dir_fd=pfd)
            return None
        finally:
            os.close(pfd)

    def _member(self, parts: tuple[str, ...], m: Member) -> str | None:
        """Make one member that is not a symlink; a reason when it is left out."""
        if m.kind == DIR:
            fd = self._dir(parts, create=True)
            if fd is None:
                return "a link or a file is where its directory goes"
            os.close(fd)
            self.dir_modes[parts] = (m.mode & 0o755) | 0o700
            return None
        if m.kind == OTHER:
            return "device, FIFO, sparse or unknown type"
        target = _parts(m.linkname) if m.kind == HARD else None
        if m.kind == HARD and (not target or target not in self.files):
            return f"a hard link to {m.linkname[:200]!r}, not a file of this archive"
        pfd = self._dir(parts[:-1], create=True)
        if pfd is None:
            return "a link or a file is where its directory goes"
        name = parts[-1]
        try:
            why = self._clear_name(pfd, name)
            if why:
                return why
            self.files.discard(parts)
            if target:
                tfd = self._dir(target[:-1], create=False)
                if tfd is None:
                    return f"a hard link to {m.linkname[:200]!r} through a link"
                try:
                    os.link(target[-1], name, src_dir_fd=tfd, dst_dir_fd=pfd,
                            follow_symlinks=False)
                finally:
                    os.close(tfd)
                self.files.add(parts)
                return None
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=pfd)
            try:
                view = memoryview(self.data)[m.offset:m.offset + m.size]
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, (m.mode & 0o755) | 0o600)
                with contextlib.suppress(OSError, OverflowError, ValueError):
                    os.utime(fd, (m.mtime, m.mtime))  # a time past what the OS can hold
            finally:
                os.close(fd)
            self.files.add(parts)
            return None
        finally:
            os.close(pfd)


__all__ = ["Member", "extract", "read_tar"]
