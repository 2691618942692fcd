"""The guest's commands and process trees: run a command with capped output and a timeout,
and kill a process tree (or every process of the sandbox's user) so that nothing forks out
of the kill.

Standard library only, Python 3.8+ (see the package docstring).
"""

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time

TRUNCATION_MARKER = "\n[... skyhub: {n} bytes of output truncated ...]\n"


class Capped:
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


# Set by the in-container guest (the zipapp's `__main__`), never on a host: the guest is then
# a child subreaper (orphans of its commands are re-parented to it, not to pid 1), so a timed-out
# command's double-forked background processes are still found, killed and reaped, and
# `kill_all` may use kill(-1).
GUEST_MAIN = False
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
        if GUEST_MAIN else None
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
    out, err = Capped(max_output), Capped(max_output)
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
    if GUEST_MAIN:
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
    if GUEST_MAIN and os.getuid() != 0 and spare == {1, me}:
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
    if GUEST_MAIN:
        _reap_orphans()
    return len(victims)
