"""skyhub's in-sandbox agent: runs commands, moves files and snapshots the workdir.

Standard library only, Python 3.8+: it is copied into containers whose Python may be old.
Two uses:
- inside a container, `python3 agent.py` serves requests over stdin/stdout (one persistent
  process per sandbox, so a command costs a message instead of a Docker exec, ~70 ms);
- on the host, the local backend calls `run_command` etc. directly.

Wire format: each message is a 4-byte big-endian length and a UTF-8 JSON object; bytes travel
base64-encoded. Requests have an `op` (`exec`, `write`, `read`, `tar`, `untar`, `snapshot`,
`restore`, `kill_all`, `ping`); replies have `ok` and either the result or `error`.
"""

import base64
import contextlib
import io
import json
import os
import selectors
import shutil
import signal
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


def _descendants(pid):
    """Pids whose parent chain leads to `pid` (read from /proc; empty where there is none)."""
    children = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid):
    """SIGKILL a process, its process group and every descendant (even ones that called
    setsid), so a timed-out command leaves nothing running."""
    victims = _descendants(pid)
    for target in [pid, *victims]:
        with contextlib.suppress(OSError):
            os.killpg(target, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(target, signal.SIGKILL)


def run_command(cmd, timeout=30.0, cwd=None, env=None, stdin=None, max_output=1 << 20,
                shell="/bin/sh", preexec_fn=None, wrap=None):
    """Run `cmd` (a string for `shell -c`, or an argv list) and return a result dict:
    `exit_code` (128+N when killed by signal N), `stdout`/`stderr` bytes capped at
    `max_output` each with a marker, `timed_out`, `duration_s`.

    On timeout the whole process tree is killed. `wrap` (argv prefix, e.g. bubblewrap) and
    `preexec_fn` (rlimits) let the local backend isolate the command.
    """
    argv = [shell, "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
    if wrap:
        argv = list(wrap) + argv
    start = time.monotonic()
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
            kill_tree(proc.pid)
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
        kill_tree(proc.pid)
    code = proc.wait()
    return {"exit_code": 128 - code if code < 0 else code, "stdout": out.value(),
            "stderr": err.value(), "timed_out": timed_out,
            "duration_s": time.monotonic() - start}


def kill_all(keep=()):
    """SIGKILL every process this user can see except pid 1, ourselves, our parents and
    `keep`: what a pool does to hand out a sandbox with no process left by its last user."""
    spare = {1, os.getpid()} | set(keep)
    pid = os.getppid()
    while pid > 1:
        spare.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    killed = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in spare:
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


def tar_bytes(path, arcname="."):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(path, arcname=arcname)
    return buf.getvalue()


def untar_bytes(data, dest):
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        _safe_extract(tar, dest)


def _safe_extract(tar, dest):
    if hasattr(tarfile, "data_filter"):  # Python >= 3.12 and patched 3.8-3.11
        tar.extractall(dest, filter="tar")
        return
    root = os.path.realpath(dest)
    for member in tar.getmembers():
        target = os.path.realpath(os.path.join(dest, member.name))
        if target != root and not target.startswith(root + os.sep):
            raise ValueError(f"refusing to extract {member.name!r} outside {dest}")
    tar.extractall(dest)


def _force_remove(func, path, exc_info):
    """rmtree's error handler: a command may have made a directory unreadable or unwritable
    (chmod 000), which stops even its owner; make it ours again and retry."""
    with contextlib.suppress(OSError):
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, onerror=_force_remove)
        else:
            os.unlink(path)


def clear_dir(path):
    """Remove everything inside `path`, keeping `path` itself (and its owner and mode)."""
    for entry in os.listdir(path):
        full = os.path.join(path, entry)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, onerror=_force_remove)
        else:
            with contextlib.suppress(OSError):
                os.unlink(full)


def snapshot_dir(path, dest_file):
    """Save `path`'s contents as an uncompressed tar (fast to write and to restore)."""
    os.makedirs(os.path.dirname(dest_file), exist_ok=True)
    with tarfile.open(dest_file, mode="w") as tar:
        for entry in sorted(os.listdir(path)):
            tar.add(os.path.join(path, entry), arcname=entry)


def restore_dir(path, src_file):
    clear_dir(path)
    with tarfile.open(src_file, mode="r") as tar:
        _safe_extract(tar, path)


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
            r = run_command(req["cmd"], timeout=req.get("timeout"), cwd=req.get("cwd"), env=env,
                            stdin=stdin, max_output=req.get("max_output", 1 << 20))
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
                return {"ok": True, "data": _b64(f.read())}
        if op == "tar":
            return {"ok": True, "data": _b64(tar_bytes(req["path"]))}
        if op == "untar":
            untar_bytes(base64.b64decode(req["data"]), req["path"])
            return {"ok": True}
        if op == "snapshot":
            dest = os.path.join(SNAPSHOT_DIR, req["name"] + ".tar")
            snapshot_dir(req["path"], dest)
            return {"ok": True, "file": dest}
        if op == "restore":
            restore_dir(req["path"], os.path.join(SNAPSHOT_DIR, req["name"] + ".tar"))
            killed = kill_all(keep=req.get("keep") or ()) if req.get("kill_processes") else 0
            return {"ok": True, "killed": killed}
        if op == "kill_all":
            return {"ok": True, "killed": kill_all(keep=req.get("keep") or ())}
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "uid": os.getuid()}
        return {"ok": False, "error": f"unknown op {op!r}", "type": "ValueError"}
    except Exception as e:  # reported to the host, which raises or turns it into an observation
        return {"ok": False, "error": str(e), "type": type(e).__name__}


def read_message(stream):
    header = stream.read(4)
    if len(header) < 4:
        return None
    (n,) = struct.unpack(">I", header)
    body = stream.read(n)
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


def make_undumpable():
    """PR_SET_DUMPABLE=0: commands run as the same user can then neither open
    /proc/<agent>/fd/1 to forge replies (e.g. a fake passing test run) nor ptrace the agent.
    Commands it starts are dumpable again after their execve. Best effort."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except Exception:
        pass


if __name__ == "__main__":
    os.environ.pop("PYTHONPATH", None)
    make_undumpable()
    serve()
