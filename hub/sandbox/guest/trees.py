"""Safe walks of a sandbox's file trees: empty or remove a directory while the sandbox's
processes may change it, never following a symlink out of it.

Standard library only, Python 3.8+ (see the package docstring).
"""

import errno
import os
import stat

# A sandbox's tree may change while we walk it: its processes can swap a directory for a
# symlink to a host path, or move it away, at any moment, and the host side walks these
# trees as root. So every walk here goes one name at a time through directory descriptors
# opened with O_NOFOLLOW, never by path. Walks keep their own stack (no recursion, and no path
# longer than one name: a 3,000-level tree is fine) and hold two descriptors at most, climbing
# back through ".." checked against the device and inode seen on the way down.

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# what a concurrent change of the tree looks like: the name went, came, or changed type
RACES = (errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.ELOOP, errno.ENOTDIR,
          errno.EISDIR, errno.ESTALE)
TRIES = 8


def open_dir(name, dir_fd):
    """The directory `name` of `dir_fd`, never through a symlink (ELOOP/ENOTDIR otherwise).
    One of our own directories made unreadable (chmod 000) gets its owner's rwx back first:
    without root nothing below it could be read or removed."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        fd = os.open(name, getattr(os, "O_PATH", 0) | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                raise
            # through the descriptor, so the inode we checked is the one changed
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | 0o700)
            return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        finally:
            os.close(fd)


def open_top(path):
    """`path` as a directory descriptor (the path's own parents are trusted, its last name is
    not followed if it is a symlink)."""
    parent, name = os.path.split(os.path.abspath(path))
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_dir(name or ".", pfd)
    finally:
        os.close(pfd)


def _writable(fd):
    """Give our own directory `fd` its owner's rwx back (a command may have taken them);
    False when there was nothing to give."""
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o700 == 0o700:
        return False
    os.fchmod(fd, stat.S_IMODE(st.st_mode) | 0o700)
    return True


def _entries(fd):
    """[(name, is_dir)] of the directory `fd` (read through a duplicate of it)."""
    with os.scandir(fd) as it:
        return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]


class Walk:
    """A position in a tree: `fd` is the current directory, `down(name)` enters a
    subdirectory, `up()` goes back (OSError ESTALE when the directory was moved meanwhile)."""

    def __init__(self, fd):
        st = os.fstat(fd)
        self.fd, self.ids, self.names = fd, [(st.st_dev, st.st_ino)], []

    def down(self, name):
        fd = open_dir(name, self.fd)
        st = os.fstat(fd)
        os.close(self.fd)
        self.fd = fd
        self.ids.append((st.st_dev, st.st_ino))
        self.names.append(name)

    def up(self):
        self.ids.pop()
        try:
            fd = os.open("..", DIR_FLAGS, dir_fd=self.fd)
        except OSError:  # removed meanwhile
            raise OSError(errno.ESTALE, "a directory went away during the walk") from None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self.ids[-1]:
            os.close(fd)
            raise OSError(errno.ESTALE, "a directory moved during the walk")
        os.close(self.fd)
        self.fd = fd
        return self.names.pop()

    def close(self):
        os.close(self.fd)


def retry_writable(fn, fd, *args, **kwargs):
    """`fn(*args, **kwargs)`; on PermissionError once more after making `fd` writable."""
    try:
        return fn(*args, **kwargs)
    except PermissionError:
        if not _writable(fd):
            raise
        return fn(*args, **kwargs)


def _empty(top):
    """Remove everything below the directory `top` (which stays open and in place). Returns
    how many races with a concurrent writer it lost (what that writer made may be left); any
    other failure raises."""
    walk, lost = Walk(os.dup(top)), 0
    try:
        todo = [retry_writable(_entries, walk.fd, walk.fd)]
        while todo:
            if not todo[-1]:
                todo.pop()
                if todo:
                    name = walk.up()
                    try:
                        retry_writable(os.rmdir, walk.fd, name, dir_fd=walk.fd)
                    except OSError as e:
                        if e.errno not in RACES:
                            raise
                        lost += 1
                continue
            name, is_dir = todo[-1].pop()
            try:
                if not is_dir:
                    try:
                        retry_writable(os.unlink, walk.fd, name, dir_fd=walk.fd)
                        continue
                    except IsADirectoryError:  # a directory now
                        pass
                try:
                    retry_writable(walk.down, walk.fd, name)
                except OSError as e:
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    retry_writable(os.unlink, walk.fd, name, dir_fd=walk.fd)  # not a dir now
                    continue
                try:
                    todo.append(_entries(walk.fd))
                except OSError as e:  # we are inside it without its listing: start over
                    raise OSError(errno.ESTALE, f"cannot list a directory: {e}") from e
            except OSError as e:
                if e.errno not in RACES or e.errno == errno.ESTALE:
                    raise
                lost += 1
    finally:
        walk.close()
    return lost


def clear(fd):
    """`_empty` until it wins (a moved directory means starting again from the top)."""
    for _ in range(TRIES):
        try:
            if not _empty(fd):
                return
        except OSError as e:
            if e.errno != errno.ESTALE:
                raise


def clear_dir(path):
    """Remove everything inside `path`, keeping `path` itself (and its owner and mode). Safe
    while the sandbox's processes change the tree; what they recreate meanwhile may stay."""
    fd = open_top(path)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        clear(fd)
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def remove_tree(path):
    """Remove `path` and everything below it (a symlink or a file: just that), as safely as
    `clear_dir`; OSError when it cannot (or keeps being refilled)."""
    parent, name = os.path.split(os.path.abspath(path))
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for _ in range(TRIES):
            try:
                fd = open_dir(name, pfd)
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                os.unlink(name, dir_fd=pfd)
                return
            try:
                clear(fd)
            finally:
                os.close(fd)
            try:
                os.rmdir(name, dir_fd=pfd)
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno not in RACES:
                    raise
        raise OSError(errno.ENOTEMPTY, "kept being refilled while it was removed", path)
    finally:
        os.close(pfd)
