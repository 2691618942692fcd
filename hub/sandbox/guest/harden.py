"""The guest's hardening and the state a restore resets beyond the workdir: the guest made
undumpable and a child subreaper, the places the sandbox's user may write, its System V IPC.

Standard library only, Python 3.8+ (see the package docstring).
"""

import contextlib
import os
import stat


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


def set_child_subreaper():
    """PR_SET_CHILD_SUBREAPER: orphans of the guest's commands are re-parented to the guest,
    not to pid 1, so they stay its to kill and reap. Best effort."""
    return _prctl(36, 1)
