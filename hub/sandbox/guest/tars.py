"""Tars of a sandbox's trees, made and extracted one name at a time through directory
descriptors (see `trees`): tar and untar for transfers, snapshot and restore of a directory.

Standard library only, Python 3.8+ (see the package docstring).
"""

import errno
import io
import os
import shutil
import stat
import tarfile

from .trees import RACES, TRIES, Walk, clear, open_dir, open_top, remove_tree, retry_writable


class _Exactly:
    """Exactly `size` bytes of a file that may change while it is read (zeros pad a file
    that shrank), so a tar member's header never lies about its data."""

    def __init__(self, f, size):
        self.f, self.left = f, size

    def read(self, n=-1):
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.f.read(n)
        data += b"\0" * (n - len(data))
        self.left -= n
        return data


def _add_entry(tar, dir_fd, name, arcname, st, links):
    """Add the entry `name` of `dir_fd` (already lstat-ed as `st`) to `tar`, not recursing.
    Sockets and device nodes are left out (live state; commands cannot make devices)."""
    info = tarfile.TarInfo(arcname)
    info.mode, info.uid, info.gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
    info.mtime = int(st.st_mtime)
    if stat.S_ISREG(st.st_mode):
        key = (st.st_dev, st.st_ino)
        if st.st_nlink > 1 and key in links:
            info.type, info.linkname = tarfile.LNKTYPE, links[key]
            tar.addfile(info)
            return
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as f:
            now = os.fstat(fd)
            if not stat.S_ISREG(now.st_mode):
                return  # swapped for something else meanwhile
            info.size = now.st_size
            tar.addfile(info, _Exactly(f, now.st_size))
        if st.st_nlink > 1:
            links[key] = arcname
    elif stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(name, dir_fd=dir_fd)
        tar.addfile(info)
    elif stat.S_ISFIFO(st.st_mode):
        info.type = tarfile.FIFOTYPE
        tar.addfile(info)


def _add_tree(tar, dir_fd, name, arcname):
    """Add the entry `name` of `dir_fd` as `arcname` and, for a directory, its whole tree
    (members `arcname/...`, parents first, names sorted). Entries that vanish or change type
    while they are read are left out."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    links = {}
    _add_entry(tar, dir_fd, name, arcname, st, links)
    if not stat.S_ISDIR(st.st_mode):
        return
    walk = Walk(open_dir(name, dir_fd))
    try:
        todo, arcs = [sorted(os.listdir(walk.fd), reverse=True)], [arcname]
        while todo:
            if not todo[-1]:
                todo.pop()
                arcs.pop()
                if todo:
                    walk.up()
                continue
            child = todo[-1].pop()
            arc = arcs[-1] + "/" + child
            try:
                st = os.stat(child, dir_fd=walk.fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    _add_entry(tar, walk.fd, child, arc, st, links)
                    continue
                walk.down(child)
            except OSError as e:
                if e.errno not in RACES:
                    raise
                continue
            _add_entry(tar, walk.fd, ".", arc, os.fstat(walk.fd), links)
            todo.append(sorted(os.listdir(walk.fd), reverse=True))
            arcs.append(arc)
    finally:
        walk.close()


def _member_parts(name):
    """A member's name as components below the destination (ValueError if it leaves it)."""
    parts = name.split("/")
    if "" in parts or "." in parts:
        parts = [p for p in parts if p not in ("", ".")]
    if name.startswith("/") or ".." in parts:
        raise ValueError(f"refusing to extract {name!r}: it would land outside the destination")
    return parts


class _Extract:
    """Extract a tar below the directory `top`, one name at a time, never through a symlink.

    `replace` (a restore): whatever is in the way (a concurrent process's doing) is removed, a
    member that keeps losing races with such a process is left out, and `top` gets the mode
    of the member "."; otherwise a symlink or file where a directory is needed is refused
    (ValueError) and `top` keeps its mode. Files in the way are replaced, never written
    through. `owner`: (uid, gid) for everything made; else, as root, each member's own.
    Modes lose setuid/setgid; directory times are not kept; device nodes are not made."""

    def __init__(self, top, replace, owner):
        self.top, self.replace, self.owner = top, replace, owner
        self.root = os.geteuid() == 0
        self.cached, self.cached_fd = None, None  # the last parent: members come in order
        self.later = []  # directories whose mode would stop us filling them

    def run(self, tar):
        try:
            for m in tar:
                parts = _member_parts(m.name)
                if not parts:  # the destination itself: only a restore gives it back its mode
                    if self.replace:
                        self.later.append(((), m))
                    continue
                for _ in range(TRIES):
                    try:
                        self._member(tar, m, parts)
                        break
                    except OSError as e:
                        self._forget()
                        if e.errno not in RACES or not self.replace:
                            raise
            for parts, m in reversed(self.later):
                try:
                    fd = self._dir(parts, create=False)
                except OSError as e:
                    if e.errno not in RACES or not self.replace:
                        raise
                    continue
                try:
                    self._attrs(fd, m)
                finally:
                    os.close(fd)
        finally:
            self._forget()

    def _forget(self):
        if self.cached_fd is not None:
            os.close(self.cached_fd)
        self.cached, self.cached_fd = None, None

    def _cache(self, parts, fd):
        self._forget()
        self.cached, self.cached_fd = parts, fd

    def _dir(self, parts, create):
        """A new descriptor of the directory `parts` (made, with its parents, if `create`)."""
        c = self.cached
        if c is not None and parts[:len(c)] == c:
            fd, rest = os.dup(self.cached_fd), parts[len(c):]
        else:
            fd, rest = os.dup(self.top), parts
        try:
            for name in rest:
                nfd = self._step(fd, name, create)
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _step(self, fd, name, create):
        for _ in range(TRIES):
            try:
                return open_dir(name, fd)
            except OSError as e:
                if not create or e.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                    raise
                if e.errno != errno.ENOENT:  # a symlink or a file where a directory goes
                    if not self.replace:
                        raise ValueError(f"refusing to extract through {name!r}: it is not "
                                         "a directory") from None
                    retry_writable(os.unlink, fd, name, dir_fd=fd)
                    continue
            try:
                retry_writable(os.mkdir, fd, name, 0o755, dir_fd=fd)
            except FileExistsError:
                continue
            nfd = open_dir(name, fd)
            if self.owner or self.root:
                os.fchown(nfd, *(self.owner or os.fstat(fd)[4:6]))
            return nfd
        raise OSError(errno.EEXIST, "kept changing while it was extracted", name)

    def _member(self, tar, m, parts):
        parts = tuple(parts)
        if m.isdir():
            fd = self._dir(parts, create=True)
            if self.root or m.mode & 0o700 == 0o700:
                self._attrs(fd, m)
            else:
                self.later.append((parts, m))
            self._cache(parts, fd)  # its members come next
            return
        if parts[:-1] != self.cached:
            self._cache(parts[:-1], self._dir(parts[:-1], create=True))
        pfd, name = self.cached_fd, parts[-1]
        if m.isreg():
            fd = self._make(pfd, name, lambda: os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600, dir_fd=pfd))
            with os.fdopen(fd, "wb") as f:
                shutil.copyfileobj(tar.extractfile(m), f, 1 << 20)
                f.flush()
                self._attrs(fd, m)
        elif m.issym():
            self._make(pfd, name, lambda: os.symlink(m.linkname, name, dir_fd=pfd))
            self._lchown(pfd, name, m)
        elif m.islnk():
            target = tuple(_member_parts(m.linkname))
            if not target:
                raise ValueError(f"refusing to extract {m.name!r}: a hard link to the "
                                 "destination itself")
            tfd = self._dir(target[:-1], create=False)
            try:
                self._make(pfd, name, lambda: os.link(target[-1], name, src_dir_fd=tfd,
                                                      dst_dir_fd=pfd, follow_symlinks=False))
            finally:
                os.close(tfd)
        elif m.isfifo():
            self._make(pfd, name, lambda: os.mkfifo(name, m.mode & 0o777, dir_fd=pfd))
            self._lchown(pfd, name, m)

    def _make(self, pfd, name, make):
        """`make()`, after removing what is in the way."""
        for _ in range(TRIES):
            try:
                return retry_writable(make, pfd)
            except FileExistsError:
                pass
            try:
                retry_writable(os.unlink, pfd, name, dir_fd=pfd)
            except IsADirectoryError:
                if not self.replace:
                    raise
                fd = open_dir(name, pfd)
                try:
                    clear(fd)
                finally:
                    os.close(fd)
                retry_writable(os.rmdir, pfd, name, dir_fd=pfd)
            except FileNotFoundError:
                pass
        raise OSError(errno.EEXIST, "kept being recreated while it was extracted", name)

    def _ids(self, m):
        return self.owner or ((m.uid, m.gid) if self.root else None)

    def _lchown(self, pfd, name, m):
        ids = self._ids(m)
        if ids:
            os.chown(name, *ids, dir_fd=pfd, follow_symlinks=False)

    def _attrs(self, fd, m):
        ids = self._ids(m)
        if ids:
            os.fchown(fd, *ids)
        os.fchmod(fd, m.mode & 0o1777)
        if not m.isdir():
            os.utime(fd, (m.mtime, m.mtime))


def _write_tar(fileobj, path, arcname, dir_fd=None):
    """Tar `path` (the entry `path` of `dir_fd`, when given) into `fileobj`."""
    if dir_fd is not None:
        with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
            _add_tree(tar, dir_fd, path, arcname)
        return
    parent, name = os.path.split(os.path.abspath(path))
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _write_tar(fileobj, name or ".", arcname, pfd)
    finally:
        os.close(pfd)


def tar_bytes(path, arcname=".", dir_fd=None):
    """An uncompressed tar of `path` (a file, a symlink, or a directory and its tree) whose
    members are named `arcname` and `arcname/...`. With `dir_fd`, `path` is the name of one
    of its entries (not followed if it is a symlink)."""
    buf = io.BytesIO()
    _write_tar(buf, path, arcname, dir_fd)
    return buf.getvalue()


def untar_bytes(data, dest, owner=None):
    """Extract a tar below the directory `dest` (made if missing). Names that leave `dest`
    or pass through a symlink are refused (ValueError); nothing is written through a link.
    `owner`: (uid, gid) for everything made."""
    os.makedirs(dest, exist_ok=True)
    fd = open_top(dest)
    try:
        untar_at(data, fd, owner)
    finally:
        os.close(fd)


def untar_at(data, dir_fd, owner=None):
    """`untar_bytes` below the directory `dir_fd`."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        _Extract(dir_fd, False, owner).run(tar)


def snapshot_dir(path, dest_file):
    """Save the directory `path` (itself as member ".", then its tree) as an uncompressed
    tar: fast to write and to restore."""
    os.makedirs(os.path.dirname(dest_file) or ".", exist_ok=True)
    with open(dest_file, "wb") as f:
        _write_tar(f, path, ".")


def restore_dir(path, src_file, owner=None):
    """Put the directory `path` back as `snapshot_dir` saved it in `src_file` (or as
    `tar_bytes` gave it, when `src_file` is those bytes): exactly, when nothing else changes
    the tree meanwhile; safely in any case (nothing outside `path` is touched, whatever a
    concurrent process does, but what it changes may stay).
    `owner`: (uid, gid) for everything restored."""
    fd = open_top(path)
    try:
        clear(fd)
        src = {"fileobj": io.BytesIO(src_file)} if isinstance(src_file, bytes) else {
            "name": src_file}
        with tarfile.open(mode="r", **src) as tar:
            _Extract(fd, replace=True, owner=owner).run(tar)
    finally:
        os.close(fd)


def pack(entries):
    """One tar of absolute paths, `[path, recursive]` each, named without their leading "/"
    (a directory not `recursive`: its entry only): what changed in a container, for another's
    `unpack`. Entries gone meanwhile are left out."""
    buf = io.BytesIO()
    links = {}
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, recursive in entries:
            parent, name = os.path.split(os.path.normpath(path))
            try:
                pfd = os.open(parent or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if recursive:
                    _add_tree(tar, pfd, name, path.lstrip("/"))
                else:
                    st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
                    _add_entry(tar, pfd, name, path.lstrip("/"), st, links)
            except OSError as e:
                if e.errno not in RACES:
                    raise
            finally:
                os.close(pfd)
    return buf.getvalue()


def unpack(data, delete):
    """Remove the paths `delete`, then extract `pack`'s tar at "/" (members' own owners, as
    root): another container's changes, made in this one."""
    for path in delete:
        remove_tree(path)
    fd = open_top("/")
    try:
        untar_at(data, fd)
    finally:
        os.close(fd)


def without_top(data):
    """A tar of a directory without its own entry ("."): restoring it then changes only
    what is inside (the mode of a root-owned 1777 /tmp is not ours to set)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, \
            tarfile.open(fileobj=buf, mode="w") as out:
        for m in src:
            if m.name not in (".", "./", ""):
                out.addfile(m, src.extractfile(m) if m.isreg() else None)
    return buf.getvalue()
