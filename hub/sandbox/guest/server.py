"""The guest's wire server: one request in, one reply out, over its stdin and stdout.

Wire format: each message is a 4-byte big-endian length and a UTF-8 JSON object; bytes travel
base64-encoded. Requests have an `op` (`exec`, `write`, `read`, `tar`, `tars`, `untar`,
`snapshot`, `restore`, `kill_all`, `ping`, `places`); replies have `ok` and either the result
or `error`.

Standard library only, Python 3.8+ (see the package docstring).
"""

import base64
import errno
import json
import os
import resource
import struct
import sys

from .harden import remove_sysv_ipc, writable_places
from .procs import kill_all, run_command
from .tars import (
    pack,
    restore_dir,
    snapshot_dir,
    tar_bytes,
    unpack,
    untar_bytes,
    without_top,
)
from .trees import clear_dir

SNAPSHOT_DIR = "/tmp/.skyhub-snapshots"

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
                        tar = without_top(tar)
                    data.append(_b64(tar))
                except FileNotFoundError:
                    data.append(None)
            _fits(b"", req, sum(len(d or "") for d in data))
            return {"ok": True, "data": data}
        if op == "pack":  # changed paths of a container, for another's "unpack" (a fork)
            return {"ok": True, "data": _b64(_fits(pack(req["entries"]), req))}
        if op == "unpack":
            unpack(base64.b64decode(req["data"]), req.get("delete") or ())
            return {"ok": True}
        if op == "untar":
            untar_bytes(base64.b64decode(req["data"]), req["path"])
            return {"ok": True}
        if op == "snapshot":
            dest = os.path.join(SNAPSHOT_DIR, req["name"] + ".tar")
            snapshot_dir(req["path"], dest)
            return {"ok": True, "file": dest}
        if op == "restore":
            # `places`: [[directory, its tar (a file, or {"data": base64} sent along)], ...];
            # `clear`: directories to empty (mqueue); `ipc`: also remove our System V IPC
            # objects
            places = req.get("places") or [
                [req["path"], os.path.join(SNAPSHOT_DIR, req["name"] + ".tar")]]
            for path, src in places:
                restore_dir(path, base64.b64decode(src["data"]) if isinstance(src, dict)
                            else src)
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
