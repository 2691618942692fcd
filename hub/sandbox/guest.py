"""skyhub's guest: the in-sandbox daemon that runs commands, moves files and snapshots the workdir.

Standard library only, Python 3.8+: it is copied into containers whose Python may be old.
Two uses:
- inside a container, `python3 guest.py` serves requests over stdin/stdout (one persistent
  process per sandbox, so a command costs a message instead of a Docker exec, ~70 ms);
- on the host, the local backend calls `run_command` etc. directly.

Wire format: each message is a 4-byte big-endian length and a UTF-8 JSON object; bytes travel
base64-encoded. Requests have an `op` (`exec`, `write`, `read`, `tar`, `untar`, `snapshot`,
`restore`, `kill_all`, `ping`); replies have `ok` and either the result or `error`.
"""

import os

if __name__ == "__main__":  # before anything else is imported: see `make_undumpable`
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    except Exception:  # done again, best effort, in `__main__` below
        pass

import base64
import contextlib
import errno
import io
import json
import resource
import selectors
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tarfile
import threading
import time

TRUNCATION_MARKER = "\n[... skyhub: {n} bytes of output truncated ...]\n"
SNAPSHOT_DIR = "/tmp/.skyhub-snapshots"


class _Capped:
    """Keeps the first and last `limit // 2` bytes of a stream and counts the rest, so a
    command printing gigabytes costs at most `limit` bytes of memory."""

    def __init__(self, limit):
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk):
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - self.half
            if excess > 0:
                del self.tail[:excess]
                self.dropped += excess

    def value(self):
        if not self.dropped:
            return bytes(self.head + self.tail)
        marker = TRUNCATION_MARKER.format(n=self.dropped).encode()
        return bytes(self.head) + marker + bytes(self.tail)


# Set by the in-container guest (`__main__`), never on a host: the guest is then a child
# subreaper (orphans of its commands are re-parented to it, not to pid 1), so a timed-out
# command's double-forked background processes are still found, killed and reaped, and
# `kill_all` may use kill(-1).
_GUEST_MAIN = False
KILL_WAIT_S = 5.0  # how long a kill waits for its victims to be gone


def _proc_table():
    """{pid: (ppid, state, start time)} of every process in /proc (state b"Z": a zombie)."""
    table = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            table[int(entry)] = (int(fields[1]), fields[0], int(fields[19]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def _tree(table, roots):
    """The live (non-zombie) processes of `table` among `roots` and their descendants."""
    children = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo, seen = [], [r for r in roots if r in table], set(roots)
    while todo:
        pid = todo.pop()
        if table[pid][1] != b"Z":
            out.append(pid)
        for child in children.get(pid, ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return out


def _descendants(pid):
    """Pids whose parent chain leads to `pid` (read from /proc; empty where there is none)."""
    return [p for p in _tree(_proc_table(), [pid]) if p != pid]


def _signal(pid, sig, group=False):
    with contextlib.suppress(OSError):
        (os.killpg if group else os.kill)(pid, sig)
        return True
    return False


def _wait_gone(victims, deadline):
    """Until every process of `victims` ({pid: start time}) has exited (gone from /proc, a
    zombie, or its pid reused), or `deadline` (monotonic) passes."""
    left = dict(victims)
    while left:
        for pid, start in list(left.items()):
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                if fields[0] == b"Z" or int(fields[19]) != start:
                    del left[pid]
            except (OSError, IndexError, ValueError):
                del left[pid]
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.002)


def _reap_orphans():
    """Reap the exited children we adopted as a subreaper (never one `subprocess` waits on:
    called only when no command runs)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_tree(pid, also=(), wait_s=KILL_WAIT_S):
    """SIGKILL a process, its process group and every descendant (even ones that called
    setsid), and the trees of the pids in `also`; return once they are all gone (zombies
    count as gone: dead, waiting to be reaped), or after `wait_s`.

    The tree is stopped (SIGSTOP) before it is killed, and scanned again until it stops
    growing: a process cannot fork a child that escapes the kill by being re-parented
    after its parent died."""
    roots = [pid, *also]
    victims = {}
    for root in roots:
        _signal(root, signal.SIGSTOP, group=True)
    for _ in range(64):
        table = _proc_table()
        new = [p for p in _tree(table, roots) if victims.get(p) != table[p][2]]
        if not new:
            break
        for p in new:
            victims[p] = table[p][2]
            _signal(p, signal.SIGSTOP)
    for target in [*roots, *victims]:
        _signal(target, signal.SIGKILL, group=True)
        _signal(target, signal.SIGKILL)
    victims.pop(pid, None)  # our caller's child: a zombie until it waits for it
    _wait_gone(victims, time.monotonic() + wait_s)


def _adopted(before):
    """Our children that were not there in `before`: what a command left as orphans."""
    me = os.getpid()
    return [p for p, (ppid, state, _) in _proc_table().items()
            if ppid == me and p not in before and state != b"Z"]


def run_command(cmd, timeout=30.0, cwd=None, env=None, stdin=None, max_output=1 << 20,
                shell="/bin/sh", preexec_fn=None, wrap=None):
    """Run `cmd` (a string for `shell -c`, or an argv list) and return a result dict:
    `exit_code` (128+N when killed by signal N), `stdout`/`stderr` bytes capped at
    `max_output` each with a marker, `timed_out`, `duration_s`.

    On timeout the whole process tree is killed, and the call returns once it is gone.
    `wrap` (argv prefix, e.g. bubblewrap) and `preexec_fn` (rlimits) let the local backend
    isolate the command.
    """
    argv = [shell, "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
    if wrap:
        argv = list(wrap) + argv
    start = time.monotonic()
    before = {p for p, (pp, _, _) in _proc_table().items() if pp == os.getpid()} \
        if _GUEST_MAIN else None
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            preexec_fn=preexec_fn)
    except OSError as e:
        code = 126 if isinstance(e, PermissionError) else 127
        message = f"skyhub: cannot run {argv[0]!r}: {e}\n".encode()
        return {"exit_code": code, "stdout": b"", "stderr": message, "timed_out": False,
                "duration_s": time.monotonic() - start}

    def kill():
        also = () if before is None else [p for p in _adopted(before) if p != proc.pid]
        kill_tree(proc.pid, also)

    if stdin is not None:
        def feed():
            try:
                proc.stdin.write(stdin)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        threading.Thread(target=feed, daemon=True).start()
    out, err = _Capped(max_output), _Capped(max_output)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    deadline = None if timeout is None else start + timeout
    timed_out = False
    while sel.get_map():
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            timed_out = True
            kill()
            deadline = time.monotonic() + 1.0  # drain what the dying tree wrote, then stop
            timeout = None
            wait = 1.0
        events = sel.select(wait)
        if not events and timeout is None and timed_out:
            break  # an orphan still holds the pipe open: stop reading
        for key, _ in events:
            chunk = os.read(key.fileobj.fileno(), 65536)
            if chunk:
                key.data.add(chunk)
            else:
                sel.unregister(key.fileobj)
    sel.close()
    proc.stdout.close()
    proc.stderr.close()
    if timed_out:
        kill()
    code = proc.wait()
    if _GUEST_MAIN:
        _reap_orphans()
    return {"exit_code": 128 - code if code < 0 else code, "stdout": out.value(),
            "stderr": err.value(), "timed_out": timed_out,
            "duration_s": time.monotonic() - start}


def kill_all(keep=()):
    """SIGKILL every process we may signal except pid 1, ourselves, our parents and `keep`,
    and return (the number killed) once they are gone: what a restore does so that no
    process of the sandbox's last user survives. For the in-container guest only: on a
    host it would kill its user's every process.

    Without pids to spare (`keep`) and not as root, the in-container guest first sends one
    kill(-1): the kernel signals every process of our uid at once, so nothing forks out of
    it. Then, and otherwise, /proc is scanned until no process we may signal is left."""
    me = os.getpid()
    spare = {1, me} | set(keep)
    pid = os.getppid()
    while pid > 1:
        spare.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    victims = {}
    if _GUEST_MAIN and os.getuid() != 0 and spare == {1, me}:
        for p, (_, state, start) in _proc_table().items():
            with contextlib.suppress(OSError):
                if p not in spare and state != b"Z" and \
                        os.stat(f"/proc/{p}").st_uid == os.getuid():
                    victims[p] = start
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while True:  # until a scan finds no process we may kill that was not killed already
        fresh = 0
        for p, (_, state, start) in _proc_table().items():
            if p not in spare and state != b"Z" and _signal(p, signal.SIGKILL) and \
                    victims.get(p) != start:
                victims[p] = start
                fresh += 1
        _wait_gone(victims, deadline)
        if not fresh or time.monotonic() > deadline:
            break
    if _GUEST_MAIN:
        _reap_orphans()
    return len(victims)


# ------------------------------------------------------------------------------ file trees
# A sandbox's tree may change while we walk it: its processes can swap a directory for a
# symlink to a host path, or move it away, at any moment, and the host side walks these
# trees as root. So every walk here goes one name at a time through directory descriptors
# opened with O_NOFOLLOW, never by path. Walks keep their own stack (no recursion, and no path
# longer than one name: a 3,000-level tree is fine) and hold two descriptors at most, climbing
# back through ".." checked against the device and inode seen on the way down.

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# what a concurrent change of the tree looks like: the name went, came, or changed type
_RACES = (errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.ELOOP, errno.ENOTDIR,
          errno.EISDIR, errno.ESTALE)
_TRIES = 8


def _open_dir(name, dir_fd):
    """The directory `name` of `dir_fd`, never through a symlink (ELOOP/ENOTDIR otherwise).
    One of our own directories made unreadable (chmod 000) gets its owner's rwx back first:
    without root nothing below it could be read or removed."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
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


def _open_top(path):
    """`path` as a directory descriptor (the path's own parents are trusted, its last name is
    not followed if it is a symlink)."""
    parent, name = os.path.split(os.path.abspath(path))
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _open_dir(name or ".", pfd)
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


class _Walk:
    """A position in a tree: `fd` is the current directory, `down(name)` enters a
    subdirectory, `up()` goes back (OSError ESTALE when the directory was moved meanwhile)."""

    def __init__(self, fd):
        st = os.fstat(fd)
        self.fd, self.ids, self.names = fd, [(st.st_dev, st.st_ino)], []

    def down(self, name):
        fd = _open_dir(name, self.fd)
        st = os.fstat(fd)
        os.close(self.fd)
        self.fd = fd
        self.ids.append((st.st_dev, st.st_ino))
        self.names.append(name)

    def up(self):
        self.ids.pop()
        try:
            fd = os.open("..", _DIR_FLAGS, dir_fd=self.fd)
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


def _retry_writable(fn, fd, *args, **kwargs):
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
    walk, lost = _Walk(os.dup(top)), 0
    try:
        todo = [_retry_writable(_entries, walk.fd, walk.fd)]
        while todo:
            if not todo[-1]:
                todo.pop()
                if todo:
                    name = walk.up()
                    try:
                        _retry_writable(os.rmdir, walk.fd, name, dir_fd=walk.fd)
                    except OSError as e:
                        if e.errno not in _RACES:
                            raise
                        lost += 1
                continue
            name, is_dir = todo[-1].pop()
            try:
                if not is_dir:
                    try:
                        _retry_writable(os.unlink, walk.fd, name, dir_fd=walk.fd)
                        continue
                    except IsADirectoryError:  # a directory now
                        pass
                try:
                    _retry_writable(walk.down, walk.fd, name)
                except OSError as e:
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    _retry_writable(os.unlink, walk.fd, name, dir_fd=walk.fd)  # not a dir now
                    continue
                try:
                    todo.append(_entries(walk.fd))
                except OSError as e:  # we are inside it without its listing: start over
                    raise OSError(errno.ESTALE, f"cannot list a directory: {e}") from e
            except OSError as e:
                if e.errno not in _RACES or e.errno == errno.ESTALE:
                    raise
                lost += 1
    finally:
        walk.close()
    return lost


def _clear(fd):
    """`_empty` until it wins (a moved directory means starting again from the top)."""
    for _ in range(_TRIES):
        try:
            if not _empty(fd):
                return
        except OSError as e:
            if e.errno != errno.ESTALE:
                raise


def clear_dir(path):
    """Remove everything inside `path`, keeping `path` itself (and its owner and mode). Safe
    while the sandbox's processes change the tree; what they recreate meanwhile may stay."""
    fd = _open_top(path)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        _clear(fd)
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
        for _ in range(_TRIES):
            try:
                fd = _open_dir(name, pfd)
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                os.unlink(name, dir_fd=pfd)
                return
            try:
                _clear(fd)
            finally:
                os.close(fd)
            try:
                os.rmdir(name, dir_fd=pfd)
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno not in _RACES:
                    raise
        raise OSError(errno.ENOTEMPTY, "kept being refilled while it was removed", path)
    finally:
        os.close(pfd)


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
    walk = _Walk(_open_dir(name, dir_fd))
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
                if e.errno not in _RACES:
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
                for _ in range(_TRIES):
                    try:
                        self._member(tar, m, parts)
                        break
                    except OSError as e:
                        self._forget()
                        if e.errno not in _RACES or not self.replace:
                            raise
            for parts, m in reversed(self.later):
                try:
                    fd = self._dir(parts, create=False)
                except OSError as e:
                    if e.errno not in _RACES or not self.replace:
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
        for _ in range(_TRIES):
            try:
                return _open_dir(name, fd)
            except OSError as e:
                if not create or e.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                    raise
                if e.errno != errno.ENOENT:  # a symlink or a file where a directory goes
                    if not self.replace:
                        raise ValueError(f"refusing to extract through {name!r}: it is not "
                                         "a directory") from None
                    _retry_writable(os.unlink, fd, name, dir_fd=fd)
                    continue
            try:
                _retry_writable(os.mkdir, fd, name, 0o755, dir_fd=fd)
            except FileExistsError:
                continue
            nfd = _open_dir(name, fd)
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
        for _ in range(_TRIES):
            try:
                return _retry_writable(make, pfd)
            except FileExistsError:
                pass
            try:
                _retry_writable(os.unlink, pfd, name, dir_fd=pfd)
            except IsADirectoryError:
                if not self.replace:
                    raise
                fd = _open_dir(name, pfd)
                try:
                    _clear(fd)
                finally:
                    os.close(fd)
                _retry_writable(os.rmdir, pfd, name, dir_fd=pfd)
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
    fd = _open_top(dest)
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
    """Put the directory `path` back as `snapshot_dir` saved it in `src_file`: exactly, when
    nothing else changes the tree meanwhile; safely in any case (nothing outside `path` is
    touched, whatever a concurrent process does, but what it changes may stay).
    `owner`: (uid, gid) for everything restored."""
    fd = _open_top(path)
    try:
        _clear(fd)
        with tarfile.open(src_file, mode="r") as tar:
            _Extract(fd, replace=True, owner=owner).run(tar)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ the server
def _b64(data):
    return base64.b64encode(data).decode("ascii")


def handle(req):
    """One request -> one reply dict (exceptions become `{"ok": False, "error": ...}`)."""
    op = req.get("op")
    try:
        if op == "exec":
            stdin = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
            env = req.get("env")
            if env is not None:
                env = dict(os.environ, **env)
            fsize = req.get("fsize")
            r = run_command(req["cmd"], timeout=req.get("timeout"), cwd=req.get("cwd"), env=env,
                            stdin=stdin, max_output=req.get("max_output", 1 << 20),
                            preexec_fn=None if fsize is None else _limit_file_size(fsize))
            r["stdout"], r["stderr"] = _b64(r["stdout"]), _b64(r["stderr"])
            return dict(r, ok=True)
        if op == "write":
            path = req["path"]
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(path, "wb") as f:
                f.write(base64.b64decode(req["data"]))
            if req.get("mode") is not None:
                os.chmod(path, req["mode"])
            return {"ok": True}
        if op == "read":
            with open(req["path"], "rb") as f:
                size, limit = os.fstat(f.fileno()).st_size, req.get("max_bytes")
                if limit is not None and size > limit:  # e.g. sparse: more than we can hold
                    raise OSError(errno.EFBIG, f"{req['path']} is {size} bytes, over the "
                                  f"{limit}-byte limit of a read")
                return {"ok": True, "data": _b64(f.read())}
        if op == "tar":
            return {"ok": True, "data": _b64(_fits(tar_bytes(req["path"]), req))}
        if op == "tars":  # several trees at once (a snapshot); None for a missing one
            data = []
            for path in req["paths"]:
                try:
                    tar = tar_bytes(path)
                    if os.stat(path).st_uid != os.geteuid():  # e.g. /tmp: not ours to chmod
                        tar = _without_top(tar)
                    data.append(_b64(tar))
                except FileNotFoundError:
                    data.append(None)
            _fits(b"", req, sum(len(d or "") for d in data))
            return {"ok": True, "data": data}
        if op == "untar":
            untar_bytes(base64.b64decode(req["data"]), req["path"])
            return {"ok": True}
        if op == "snapshot":
            dest = os.path.join(SNAPSHOT_DIR, req["name"] + ".tar")
            snapshot_dir(req["path"], dest)
            return {"ok": True, "file": dest}
        if op == "restore":
            # `places`: [[directory, its tar], ...]; `clear`: directories to empty (mqueue);
            # `ipc`: also remove our System V IPC objects
            places = req.get("places") or [
                [req["path"], os.path.join(SNAPSHOT_DIR, req["name"] + ".tar")]]
            for path, src in places:
                restore_dir(path, src)
            for path in req.get("clear") or ():
                clear_dir(path)
            if req.get("ipc"):
                remove_sysv_ipc()
            killed = kill_all(keep=req.get("keep") or ()) if req.get("kill_processes") else 0
            return {"ok": True, "killed": killed}
        if op == "kill_all":
            return {"ok": True, "killed": kill_all(keep=req.get("keep") or ())}
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "uid": os.getuid()}
        if op == "places":
            return dict(writable_places(), ok=True)
        return {"ok": False, "error": f"unknown op {op!r}", "type": "ValueError"}
    except Exception as e:  # reported to the host, which raises or turns it into an observation
        reply = {"ok": False, "error": str(e), "type": type(e).__name__}
        if isinstance(e, OSError) and e.errno is not None:
            reply.update(errno=e.errno, strerror=e.strerror, filename=e.filename)
        return reply


def read_message(stream, limit=None):
    """The next message, None at the end of the stream. A length past `limit` bytes raises
    ValueError before anything of it is read (a host's budget against a hijacked peer)."""
    header = stream.read(4)
    if len(header) < 4:
        return None
    (n,) = struct.unpack(">I", header)
    if limit is not None and n > limit:
        raise ValueError(f"a message of {n} bytes is over the budget of {limit} bytes")
    body = stream.read(n)
    if len(body) < n:
        return None
    return json.loads(body.decode("utf-8"))


def write_message(stream, obj):
    body = json.dumps(obj).encode("utf-8")
    stream.write(struct.pack(">I", len(body)) + body)
    stream.flush()


def serve(inp=None, out=None):
    """Answer requests until stdin ends. A request's `id`, if any, is echoed in its reply so
    the host can tell a reply from a stale or injected one."""
    inp = inp or sys.stdin.buffer
    out = out or sys.stdout.buffer
    while True:
        req = read_message(inp)
        if req is None:
            return
        reply = handle(req)
        if "id" in req:
            reply["id"] = req["id"]
        write_message(out, reply)


def _prctl(option, arg):
    try:
        import ctypes

        return ctypes.CDLL(None).prctl(option, arg, 0, 0, 0) == 0
    except Exception:
        return False


def make_undumpable():
    """PR_SET_DUMPABLE=0: commands run as the same user can then neither open
    /proc/<guest>/fd/1 to forge replies (e.g. a fake passing test run) nor ptrace the guest.
    Commands it starts are dumpable again after their execve. Best effort. The in-container
    guest does it before its other imports too, and it only ever starts in a container no
    command has run in yet (docker.py): the window before this call has nobody to use it."""
    _prctl(4, 0)


def _without_top(data):
    """A tar of a directory without its own entry ("."): restoring it then changes only
    what is inside (the mode of a root-owned 1777 /tmp is not ours to set)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, \
            tarfile.open(fileobj=buf, mode="w") as out:
        for m in src:
            if m.name not in (".", "./", ""):
                out.addfile(m, src.extractfile(m) if m.isreg() else None)
    return buf.getvalue()


def _fits(data, req, encoded=None):
    """`data`, when its reply stays under the request's `max_bytes` (else EFBIG: the host
    would have to break the channel to refuse a reply over its budget)."""
    limit = req.get("max_bytes")
    size = (len(data) + 2) // 3 * 4 if encoded is None else encoded
    if limit is not None and size + 4096 > limit:
        raise OSError(errno.EFBIG, f"what {req.get('op')!r} returns ({size} bytes in base64) "
                      f"is over the {limit}-byte limit of a transfer")
    return data


def _limit_file_size(nbytes):
    """A preexec_fn: no file the command writes may grow past `nbytes` (RLIMIT_FSIZE; the
    writer gets EFBIG or SIGXFSZ). The disk bound of images without sized tmpfs mounts.
    `resource` is imported with the guest, never in the forked child: the child still holds
    the host's pipes, and in a root image the module's file is the agent's to replace."""
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(nbytes), int(nbytes)))
    return apply


def writable_places():
    """What this user can change outside what it cannot: `dirs`, the top-most directories it
    may write (or owns, and so may chmod); `files`, the regular files it may write outside
    them; `mqueue`, those of `dirs` that are POSIX message queue mounts (their entries are
    queues: emptied, never archived). /proc and /sys are not walked."""
    uid = os.getuid()

    def changeable(path, st):
        return st.st_uid == uid or os.access(path, os.W_OK)

    mqueue = set()
    with contextlib.suppress(OSError), open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[2] == "mqueue":
                mqueue.add(parts[1])
    if changeable("/", os.lstat("/")):
        return {"dirs": ["/"], "files": [], "mqueue": []}
    dirs, files, todo = [], [], ["/"]
    while todo:
        try:
            with os.scandir(todo.pop()) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            if e.path in ("/proc", "/sys"):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                (dirs if changeable(e.path, st) else todo).append(e.path)
            elif stat.S_ISREG(st.st_mode) and changeable(e.path, st):
                files.append(e.path)
    return {"dirs": sorted(dirs), "files": sorted(files),
            "mqueue": sorted(m for m in mqueue if m in dirs)}


def remove_sysv_ipc():
    """Remove the System V shared memory segments, message queues and semaphore sets we own
    or created: like files in /dev/shm, they outlive the processes that made them."""
    import ctypes

    libc = ctypes.CDLL(None)
    uid = os.getuid()
    removed = 0
    for kind, key, rmid in (("shm", "shmid", lambda i: libc.shmctl(i, 0, None)),
                            ("msg", "msqid", lambda i: libc.msgctl(i, 0, None)),
                            ("sem", "semid", lambda i: libc.semctl(i, 0, 0))):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                header, *rows = f.read().splitlines()
        except (OSError, ValueError):
            continue
        for row in rows:
            cols = dict(zip(header.split(), row.split()))  # noqa: B905 (3.8)
            with contextlib.suppress(KeyError, ValueError):
                if uid in (int(cols["uid"]), int(cols["cuid"])):
                    removed += rmid(int(cols[key])) == 0  # IPC_RMID
    return removed


if __name__ == "__main__":
    os.environ.pop("PYTHONPATH", None)
    _GUEST_MAIN = True
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: a command's orphans stay ours to kill and reap
    make_undumpable()
    serve()
