"""skyhub's in-sandbox Jupyter bridge: runs IPython kernels and answers execute requests.

It runs inside a sandbox (the `skyhub/python` Docker image, or a local bubblewrap sandbox
with the host's Python runtime mounted read-only) next to skyhub's guest (the in-sandbox
daemon), whose framing it speaks on stdin/stdout: a 4-byte big-endian length and a UTF-8
JSON object per message.
The host never talks ZeroMQ across the sandbox boundary, so the sandbox needs no network:
the kernel's ports are on the sandbox's own loopback.

Requests (`op`): `execute` {code, timeout, max_output}, `reset` {spare} (a fresh kernel),
`ping`. One kernel is current; unless `reset` said `spare: false`, a spare is started in the
background, so replacing a kernel takes milliseconds instead of a cold start (~1 s). (The
host starts a new bridge, in a sandbox emptied of processes, for every episode: a spare
started while an agent's code ran is never handed to the next episode.)

Kernels run isolated: `python3 -I` (no user site, no PYTHON* variables) and a fresh private
directory per bridge for Jupyter's and IPython's files (IPYTHONDIR, JUPYTER_*), so no
startup file, profile or kernelspec of an earlier process is ever read.

A cell past its timeout is interrupted (SIGINT to the kernel's process group); a kernel that
ignores that, or dies, is replaced and the reply says why (`restarted`). Every process a
kernel starts inherits `SKYHUB_KERNEL=<generation>`, which is how a timed-out cell's or a
replaced kernel's leftovers (background jobs, fork-bomb copies) are found and killed within an
episode (best effort: a process can drop the marker). Between episodes the host kills every
process of the sandbox's user, this bridge included.

Works with jupyter_client 7.4 (Debian bookworm's) and 8.x; imports nothing from skyhub.
"""

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

_here = os.path.dirname(os.path.abspath(__file__))
# skyhub's guest package: its zipapp beside this file in images and sandboxes (runtime.py
# copies both there); run from where it is installed, the core's package: three levels up,
# then hub/sandbox (a checkout: envs/python/image) or sandbox (a wheel: skyhub/envs/python/image)
_top = os.path.dirname(os.path.dirname(os.path.dirname(_here)))
sys.path[:0] = [os.path.join(_here, "guest.pyz"), os.path.join(_top, "hub", "sandbox"),
                os.path.join(_top, "sandbox")]
from guest import harden, procs, server  # noqa: E402

MARKER = "SKYHUB_KERNEL"
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
INTERRUPT_GRACE_S = 5.0  # generous: a CPU-capped container also runs the spare kernel
START_TIMEOUT_S = 60.0
KERNEL_NAME = "skyhub-python3"
RUNTIME = ""  # this bridge's private dir for Jupyter's and IPython's files (see `setup_dirs`)


def setup_dirs():
    """A fresh private dir (never one an earlier process could have filled) for every file
    Jupyter and IPython read or write, and a kernelspec there that starts `python3 -I`."""
    global RUNTIME
    RUNTIME = tempfile.mkdtemp(prefix=".skyhub-jupyter-")
    for var, sub in (("JUPYTER_RUNTIME_DIR", ""), ("JUPYTER_DATA_DIR", "/data"),
                     ("JUPYTER_CONFIG_DIR", "/config"), ("IPYTHONDIR", "/ipython")):
        os.environ[var] = RUNTIME + sub
    for var in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "JUPYTER_PREFER_ENV_PATH",
                "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE"):
        os.environ.pop(var, None)
    os.environ["JUPYTER_PLATFORM_DIRS"] = "1"
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # debugpy's import-time notes
    spec_dir = os.path.join(RUNTIME, "data", "kernels", KERNEL_NAME)
    os.makedirs(spec_dir, mode=0o700)
    with open(os.path.join(spec_dir, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, "-I", "-m", "ipykernel_launcher", "-f",
                            "{connection_file}"],
                   "display_name": "Python 3 (skyhub)", "language": "python"}, f)


class Kernel:
    """One IPython kernel and a blocking client connected to it."""

    def __init__(self):
        from jupyter_client.manager import KernelManager

        self.gen = uuid.uuid4().hex[:12]
        runtime = RUNTIME
        env = dict(os.environ, **{MARKER: self.gen, "MPLBACKEND": "Agg"})
        self.km = KernelManager(kernel_name=KERNEL_NAME)
        self.km.connection_file = os.path.join(runtime, f"kernel-{self.gen}.json")
        # the kernel must not inherit our stdout (the host's message stream); what it writes
        # outside ipykernel's own capture (startup noise) is dropped, so it cannot fill a disk
        self.km.start_kernel(env=env, cwd=os.getcwd(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL,
                             extra_arguments=["--HistoryManager.enabled=False",
                                              "--InteractiveShell.xmode=Plain"])
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=START_TIMEOUT_S)
        except BaseException:
            self.kill()
            self.cleanup()
            raise

    @property
    def pid(self):
        proc = getattr(getattr(self.km, "provisioner", None), "process", None)
        if proc is None:
            proc = getattr(self.km, "kernel", None)
        return getattr(proc, "pid", 0) or 0

    def alive(self):
        try:
            return bool(self.km.is_alive())
        except Exception:
            return False

    def exit_code(self):
        proc = getattr(getattr(self.km, "provisioner", None), "process", None)
        return None if proc is None else proc.poll()

    def _victims(self):
        """This kernel's processes, not itself: its process group (fork copies stay in it),
        its descendants (by parent), and any process carrying its marker (setsid escapees)."""
        marker = f"{MARKER}={self.gen}".encode()
        parents, found = {}, set()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
                if self.pid and int(fields[2]) == self.pid:
                    found.add(int(entry))
                    continue
                # environ is read only when cheap to decide otherwise: everything is stopped
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        found.add(int(entry))
            except (OSError, IndexError, ValueError):
                pass
        todo = [self.pid] if self.pid else []
        while todo:
            parent = todo.pop()
            for pid, ppid in parents.items():
                if ppid == parent and pid not in found:
                    found.add(pid)
                    todo.append(pid)
        return found - {os.getpid(), self.pid}

    def kill_children(self):
        """Kill every process this kernel started, not the kernel. The kernel's process group
        is stopped first (SIGSTOP), so a fork bomb cannot refill the pid limit while we look
        (reading /proc of processes that fork nonstop takes seconds each); the kernel is
        continued afterwards."""
        total = 0
        for _ in range(50):
            if self.pid:
                with contextlib.suppress(OSError):
                    os.killpg(self.pid, signal.SIGSTOP)
            victims = self._victims()
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                for pid in victims:
                    with contextlib.suppress(OSError):
                        os.kill(pid, sig)
            if self.pid:
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signal.SIGCONT)
            total += len(victims)
            if not victims:
                break
        return total

    def kill(self):
        """SIGKILL the kernel and everything it started, now; `cleanup` may come later."""
        self.kill_children()
        if self.pid:
            procs.kill_tree(self.pid)

    def cleanup(self):
        """Close the client's sockets and remove the kernel's files (slow-ish: ~0.1 s)."""
        for f in (self.kc.stop_channels, lambda: self.km.shutdown_kernel(now=True)):
            with contextlib.suppress(Exception):
                f()
        with contextlib.suppress(OSError):
            os.unlink(self.km.connection_file)


class Bridge:
    def __init__(self):
        self.current = None
        self.keep_spare = True
        self._spare = None
        self._spare_thread = None

    # -- kernels -----------------------------------------------------------------------
    def _start_spare(self, retired=()):
        spare = self.keep_spare

        def run():
            for k in retired:  # already killed; their sockets and files go here, off the clock
                k.cleanup()
            # no spare on failure: the next reset starts a kernel itself and reports any error
            if spare:
                with contextlib.suppress(Exception):
                    self._spare = Kernel()

        self._spare = None
        self._spare_thread = threading.Thread(target=run, daemon=True)
        self._spare_thread.start()

    def _take_fresh(self, retired=()):
        """A ready kernel: the spare when there is one (then start the next spare)."""
        pooled = False
        if self._spare_thread is not None:
            self._spare_thread.join(START_TIMEOUT_S)
            kernel, self._spare_thread = self._spare, None
            if kernel is not None and kernel.alive():
                pooled = True
            elif kernel is not None:
                kernel.kill()
                kernel.cleanup()
                kernel = None
        else:
            kernel = None
        if kernel is None:
            kernel = Kernel()
        self._start_spare(retired)
        return kernel, pooled

    def fresh_kernel(self, cold=False):
        """Replace the current kernel: by the spare, or (`cold`, for benchmarks) by a kernel
        started now, which is what a reset costs without the spare."""
        old, self.current = self.current, None
        if old is not None:
            old.kill()
        if cold:
            self.current = Kernel()
            if old is not None:
                old.cleanup()
            return False
        self.current, pooled = self._take_fresh([old] if old is not None else [])
        return pooled

    # -- requests ----------------------------------------------------------------------
    def execute(self, code, timeout=30.0, max_output=1 << 16):
        if self.current is None or not self.current.alive():
            self.fresh_kernel()
        k = self.current
        start = time.monotonic()
        out, err = procs.Capped(max_output), procs.Capped(max_output)
        results, error = [], None
        # stop_on_error=False: after a cell that errors (our own interrupt included) ipykernel
        # 6 aborts every request that arrives before its zero-delay callback runs, so under
        # load the next cell came back "aborted", empty; we send one cell at a time anyway
        msg_id = k.kc.execute(code, silent=False, store_history=True, allow_stdin=False,
                              stop_on_error=False)
        deadline = start + (timeout if timeout else 1e9)
        timed_out, interrupted_at, restarted, done = False, None, None, False
        while not done:
            now = time.monotonic()
            if interrupted_at is None and now >= deadline:
                timed_out, interrupted_at = True, now
                with contextlib.suppress(Exception):
                    k.km.interrupt_kernel()
                k.kill_children()  # fork-bomb copies and stray jobs must not outlive the cell
            elif interrupted_at is not None and now - interrupted_at > INTERRUPT_GRACE_S:
                restarted = "the kernel did not respond to an interrupt"
                break
            try:
                msg = k.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                if not k.alive():
                    code_ = k.exit_code()
                    restarted = "the kernel died" + (
                        "" if code_ is None else " (exit code {}{})".format(
                            code_, ", e.g. out of memory or killed" if code_ < 0 else ""))
                    break
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                (out if content.get("name") == "stdout" else err).add(
                    content.get("text", "").encode("utf-8", "replace"))
            elif kind in ("execute_result", "display_data"):
                data = content.get("data", {})
                if "text/plain" in data:
                    results.append(data["text/plain"])
                elif data:
                    results.append("[{} output not shown]".format(", ".join(sorted(data))))
            elif kind == "error":
                tb = "\n".join(ANSI.sub("", line) for line in content.get("traceback", []))
                error = {"ename": content.get("ename", ""), "evalue": content.get("evalue", ""),
                         "traceback": tb}
            elif kind == "status" and content.get("execution_state") == "idle":
                done = True
        if restarted:
            self.fresh_kernel()
        else:
            self._await_reply(k, msg_id)
        result = "\n".join(results)
        if len(result) > max_output:
            cut = len(result) - max_output
            result = result[:max_output // 2] + procs.TRUNCATION_MARKER.format(n=cut) + \
                result[-(max_output // 2):]
        if error:
            for key in ("ename", "evalue", "traceback"):
                text = str(error[key])
                if len(text) > max_output:
                    text = text[:max_output // 2] + procs.TRUNCATION_MARKER.format(
                        n=len(text) - max_output) + text[-(max_output // 2):]
                error[key] = text
        return {"ok": True, "stdout": out.value().decode("utf-8", "replace"),
                "stderr": err.value().decode("utf-8", "replace"), "result": result,
                "error": error, "timed_out": timed_out, "restarted": restarted,
                "duration_s": time.monotonic() - start}

    @staticmethod
    def _await_reply(k, msg_id, timeout=2.0):
        """Consume the cell's execute_reply from the shell channel (it is due right after
        the idle status), so replies never pile up in the client's queue."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                msg = k.kc.get_shell_msg(timeout=remaining)
            except Exception:
                return
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return

    def handle(self, req):
        op = req.get("op")
        try:
            if op == "execute":
                return self.execute(req.get("code", ""), req.get("timeout") or 30.0,
                                    int(req.get("max_output") or 1 << 16))
            if op == "reset":
                start = time.monotonic()
                if "spare" in req:
                    self.keep_spare = bool(req["spare"])
                pooled = self.fresh_kernel(cold=bool(req.get("cold")))
                return {"ok": True, "pooled": pooled, "pid": self.current.pid,
                        "duration_s": time.monotonic() - start}
            if op == "ping":
                return {"ok": True, "pid": os.getpid(),
                        "kernel_pid": self.current.pid if self.current else 0}
            return {"ok": False, "error": f"unknown op {op!r}", "type": "ValueError"}
        except Exception as e:
            return {"ok": False, "error": str(e), "type": type(e).__name__}

    def close(self):
        """On the way out: kill the kernels (their files go with the sandbox)."""
        if self.current is not None:
            self.current.kill()
        if self._spare_thread is not None:
            self._spare_thread.join(START_TIMEOUT_S)
        if self._spare is not None:
            self._spare.kill()


def main():
    harden.make_undumpable()
    setup_dirs()
    bridge = Bridge()
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    try:
        while True:
            req = server.read_message(inp)
            if req is None:
                return
            reply = bridge.handle(req)
            if "id" in req:
                reply["id"] = req["id"]
            server.write_message(out, reply)
    finally:
        bridge.close()


if __name__ == "__main__":
    main()
