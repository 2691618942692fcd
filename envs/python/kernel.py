"""A Jupyter kernel inside a sandbox, driven from the host: `KernelSession`.

The kernel (ipykernel) and its client (jupyter_client) both run *inside* the sandbox, under
skyhub's kernel bridge (`skyhub/envs/python/image/kernel_bridge.py`); the host talks to the
bridge over the sandbox's process channel (`Sandbox.spawn`). So the sandbox needs no network,
the kernel's ZeroMQ ports never leave it, and the same code drives Docker and local sandboxes:

- docker: skyhub's `python` image (`skyhub images build`), which has ipykernel from Debian;
- local (bubblewrap): this interpreter's runtime (the virtualenv and its base Python) and the
  bridge are mounted read-only under /opt/skyhub; the kernel sees no host files beyond them
  and the system directories, and no network.

`reset()` leaves nothing of the previous episode: every process of the sandbox's user is
killed (daemons that left the kernel's process tree or environment marker included), the
workdir is restored and a new bridge starts a new kernel, isolated (`python3 -I`, fresh
IPython/Jupyter dirs). That costs a kernel's cold start (1-2 s), so a session keeps a second
sandbox ready in that state and recycles the used one in the background: a reset swaps them
in about a millisecond when the episode lasted longer than a recycle (`warm_reset=False`: one
sandbox, cold resets).

What comes back from the sandbox is untrusted (a cell may kill the bridge, or a process of the
agent may answer in its place): each text of a reply is capped at the cell's `max_output`, and
a reply the bridge never sends, a broken channel or a dead bridge become an observation, a new
bridge, and `CellResult.broken` (the env's `sandbox_broken`), never an exception.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from dataclasses import dataclass
from typing import Any

from skyhub.errors import ChannelBroken, ChannelTimeout, InfraError, SkyhubError
from skyhub.sandbox.base import Sandbox

from .runtime import RUNTIME_PREFIX, local_runtime, make_sandbox

#: Seconds the bridge may take beyond a cell's timeout (interrupt grace, kernel restart).
BRIDGE_SLACK_S = 90.0
#: Seconds a reset waits for the standby sandbox before recycling the live one itself.
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class CellResult:
    """What one cell did. `restarted` says why the kernel was replaced (its state is gone);
    `broken` that the sandbox's Python runtime (the bridge) had to be replaced: the agent
    killed or hijacked it, which the env reports as `sandbox_broken`."""

    stdout: str = ""
    stderr: str = ""
    result: str = ""
    error: dict[str, str] | None = None
    timed_out: bool = False
    restarted: str | None = None
    duration_s: float = 0.0
    broken: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out and not self.restarted

    def render(self, timeout: float) -> str:
        """The observation text: stdout, stderr, the last expression's value, the traceback
        and, when something happened to the kernel, a note saying what and what survived."""
        parts = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.result:
            parts.append(self.result)
        if self.error is not None and not (self.timed_out and
                                           self.error.get("ename") == "KeyboardInterrupt"):
            parts.append(self.error.get("traceback") or
                         f"{self.error.get('ename')}: {self.error.get('evalue')}")
        if self.restarted:
            parts.append(f"[skyhub: {self.restarted}; a new kernel was started and all "
                         "variables and imports are lost]")
        elif self.timed_out:
            parts.append(f"[skyhub: the cell ran past its {timeout:g} s limit and was "
                         "interrupted; the kernel and your variables are kept]")
        return "\n".join(parts) if parts else "(no output)"


class _Slot:
    """One sandbox, the snapshot of its clean workdir and the kernel bridge running in it."""

    def __init__(self, make: Any) -> None:
        self._make = make
        self.chan: Any = None
        self.sandbox, self.argv = make()
        try:
            self.clean = self.sandbox.snapshot()
            self.start_bridge()
        except BaseException:
            self.sandbox.close()
            raise

    def start_bridge(self) -> None:
        try:
            chan = self.sandbox.spawn(self.argv)
        except (ChannelBroken, OSError) as e:
            raise InfraError(f"the Jupyter kernel bridge did not start in sandbox "
                             f"{self.sandbox.id} ({e}); with backend='docker' run `skyhub "
                             "images build`, with 'local' install the 'python' extra") from e
        try:
            # no spare kernel: every episode gets a new bridge (see `KernelSession.reset`)
            reply = chan.request({"op": "reset", "spare": False}, 120)
        except ChannelBroken as e:
            chan.close()
            raise InfraError(f"the Jupyter kernel bridge did not start in sandbox "
                             f"{self.sandbox.id} ({e}); with backend='docker' run `skyhub "
                             "images build`, with 'local' install the 'python' extra") from e
        if not isinstance(reply, dict) or not reply.get("ok"):
            chan.close()
            got = reply if isinstance(reply, dict) else {}
            raise InfraError(f"no Jupyter kernel in sandbox {self.sandbox.id}: "
                             f"{_cap(str(got.get('type')), 200)}: "
                             f"{_cap(str(got.get('error')), 1000)}")
        self.chan = chan

    def drop_bridge(self) -> None:
        chan, self.chan = self.chan, None
        if chan is not None:
            with contextlib.suppress(Exception):
                chan.close()

    def recycle(self) -> None:
        """Kill every process in the sandbox (all of its user's, not only the bridge's
        tree), restore the workdir and start a new bridge: nothing of the last user
        survives. A sandbox the restore cannot bring back is replaced by a new one."""
        chan, self.chan = self.chan, None
        try:
            self.sandbox.restore(self.clean, kill_processes=True)
        except Exception:  # e.g. a container gone, or a tree its restore refuses: start over
            self.sandbox.close()
            self.sandbox, self.argv = self._make()
            self.clean = self.sandbox.snapshot()
        finally:
            if chan is not None:  # killed already: closing it only reaps it
                with contextlib.suppress(Exception):
                    chan.close()
        self.start_bridge()

    def close(self) -> None:
        self.drop_bridge()
        self.sandbox.close()


def _cap(text: str, limit: int) -> str:
    """`text` cut to its first and last `limit // 2` characters, with the agent's marker."""
    if len(text) <= limit:
        return text
    from skyhub.sandbox.guest.procs import TRUNCATION_MARKER

    half = max(limit // 2, 1)
    return text[:half] + TRUNCATION_MARKER.format(n=len(text) - 2 * half) + text[-half:]


class _BadReply(SkyhubError):
    """The bridge answered with something it never sends (too big, wrong types)."""


class KernelSession:
    """One sandbox with a Jupyter kernel in it, reused across episodes.

    `run(code)` executes a cell; `reset()` gives a fresh kernel and the workdir as it was at
    creation, with no process of the previous episode left (all of the sandbox user's
    processes are killed, then a new kernel bridge starts). With `warm_reset` (the default)
    a second sandbox is kept ready that way, so `reset()` swaps sandboxes in milliseconds and
    the used one is recycled in the background; without it, `reset()` waits for a kernel's
    cold start (~1-2 s) and uses one sandbox.

    Raises `InfraError` when the sandbox itself fails (not for anything the code does).
    """

    def __init__(self, backend: str = "auto", *, cpus: float = 1.0, memory_mb: int = 2048,
                 warm_reset: bool = True, **sandbox_kwargs: Any) -> None:
        self.warm_reset = warm_reset
        self._make = functools.partial(make_sandbox, backend, cpus=cpus, memory_mb=memory_mb,
                                       **sandbox_kwargs)
        self._lock = threading.Lock()
        self._standby: _Slot | None = None
        self._standby_thread: threading.Thread | None = None
        self._closed = False
        self._live = _Slot(self._make)
        if warm_reset:
            self._prepare(None)

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox the current episode runs in."""
        return self._live.sandbox

    @property
    def backend(self) -> str:
        return self.sandbox.backend

    @property
    def _chan(self) -> Any:
        return self._live.chan

    # -- the standby sandbox ---------------------------------------------------------------
    def _prepare(self, used: _Slot | None) -> None:
        """In the background: recycle `used` (or make a new slot) into the standby."""
        def run() -> None:
            slot = None
            try:
                if used is None:
                    slot = _Slot(self._make)
                else:
                    slot = used
                    slot.recycle()
            except Exception:  # no standby; the next reset recycles in the foreground
                if slot is not None:
                    slot.close()
                return
            with self._lock:
                if not self._closed:
                    self._standby, slot = slot, None
            if slot is not None:  # closed meanwhile
                slot.close()

        self._standby_thread = threading.Thread(target=run, daemon=True,
                                                name="skyhub-kernel-standby")
        self._standby_thread.start()

    def _take_standby(self, timeout: float) -> _Slot | None:
        thread, self._standby_thread = self._standby_thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():  # still starting: let it finish for a later reset
                self._standby_thread = thread
                return None
        with self._lock:
            slot, self._standby = self._standby, None
        return slot

    # -- requests ----------------------------------------------------------------------------
    def _request(self, req: dict[str, Any], timeout: float) -> tuple[dict[str, Any] | None, str]:
        """The bridge's reply, or (None, why) when the bridge died, broke its channel or
        answered nonsense (e.g. a process of the agent posing as it): the bridge is then
        replaced. The agent may have wrecked its sandbox so that no bridge starts (e.g. `rm
        -rf /` removing the /lib symlinks of a local sandbox's namespace, or a chmod of the
        workdir): then the sandbox is restored to the episode's start and tried again;
        `InfraError` only when even that fails (the sandbox is gone)."""
        live = self._live
        if live.chan is None:
            self._restart_bridge()
        why = ""
        try:
            reply = live.chan.request(req, timeout)
            if not isinstance(reply, dict):
                raise _BadReply("not an object")
        except ChannelBroken as e:
            what = "stopped answering" if isinstance(e, ChannelTimeout) else "was killed"
            reply, why = None, f"the Python runtime in the sandbox {what} ({_cap(str(e), 300)})"
        except _BadReply as e:
            reply, why = None, f"the Python runtime answered with a malformed reply ({e})"
        if reply is not None and not reply.get("ok"):
            reply, why = None, ("the Python runtime in the sandbox failed: "
                                f"{_cap(str(reply.get('type')), 100)}: "
                                f"{_cap(str(reply.get('error')), 300)}")
        if reply is None:
            why += self._restart_bridge()
        return reply, why

    def _restart_bridge(self) -> str:
        """A new bridge in the live sandbox; restores the sandbox first if none starts."""
        live = self._live
        live.drop_bridge()
        try:
            live.start_bridge()
            return ""
        except InfraError:
            pass
        try:  # an agent-made obstacle is undone by a restore; a sandbox that is gone is not
            live.sandbox.restore(live.clean, kill_processes=True)
            live.start_bridge()
        except Exception as e:
            raise InfraError(f"the Python runtime in sandbox {live.sandbox.id} cannot be "
                             f"restarted, even after a restore: {e}") from e
        return ("; it could not be restarted in this state, so the sandbox was reset to the "
                "start of the episode: its files are gone too")

    def run(self, code: str, timeout: float = 10.0, max_output: int = 8192) -> CellResult:
        """Execute `code` in the kernel. Past `timeout` s it is interrupted (state kept); a
        kernel that ignores the interrupt or dies is replaced (`restarted` says why). Each
        text of the result is at most about `max_output` characters, whatever the sandbox
        sends back; a reply the bridge would never send (oversized, malformed) is treated as
        the bridge's death (`broken=True`)."""
        start = time.monotonic()
        reply, why = self._request({"op": "execute", "code": code, "timeout": timeout,
                                    "max_output": max_output}, timeout + BRIDGE_SLACK_S)
        if reply is not None:
            try:
                return _cell_result(reply, max_output)
            except _BadReply as e:
                why = f"the Python runtime answered with an oversized or malformed reply ({e})"
                why += self._restart_bridge()
        return CellResult(restarted=why, broken=True, duration_s=time.monotonic() - start)

    def reset(self, *, cold: bool = False) -> bool:
        """A fresh kernel and the workdir as it was at creation, in a sandbox where no process
        of the previous episode survives. Returns whether it came warm from the standby
        sandbox (the usual case with `warm_reset`) rather than from a kernel's cold start
        (`cold=True` forces one: what a reset costs without the standby)."""
        if self.warm_reset and not cold:
            slot = self._take_standby(START_TIMEOUT_S)
            if slot is not None:
                used, self._live = self._live, slot
                self._prepare(used)
                return True
        self._live.recycle()
        if self.warm_reset and self._standby_thread is None and self._standby is None:
            self._prepare(None)  # the standby failed earlier: make a new one
        return False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            standby, self._standby = self._standby, None
        thread = self._standby_thread
        if thread is not None:
            thread.join(START_TIMEOUT_S)
        for slot in (standby, self._live):
            if slot is not None:
                with contextlib.suppress(Exception):
                    slot.close()

    def __enter__(self) -> KernelSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cell_result(reply: dict[str, Any], max_output: int) -> CellResult:
    """The reply as a `CellResult`, each text capped; `_BadReply` for what the real bridge
    never sends (wrong types, texts far past `max_output`: a hijacked bridge)."""
    limit = 2 * max_output + 4096  # the bridge's own caps plus its truncation markers

    def text(key: str, cap: int = max_output) -> str:
        v = reply.get(key)
        if v is None:
            return ""
        if not isinstance(v, str):
            raise _BadReply(f"{key} is a {type(v).__name__}")
        if len(v) > limit:
            raise _BadReply(f"{len(v)} characters of {key}")
        return _cap(v, cap)

    error = reply.get("error")
    if error is not None:
        if not isinstance(error, dict):
            raise _BadReply("error is not an object")
        error = {k: _text_of(error, k, limit, max_output) for k in ("ename", "evalue",
                                                                  "traceback")}
    duration = reply.get("duration_s")
    restarted = reply.get("restarted")
    if restarted is not None and not isinstance(restarted, str):
        raise _BadReply("restarted is not a string")
    return CellResult(stdout=text("stdout"), stderr=text("stderr"), result=text("result"),
                      error=error, timed_out=reply.get("timed_out") is True,
                      restarted=_cap(restarted, 500) if restarted else None,
                      duration_s=float(duration) if isinstance(duration, int | float) else 0.0)


def _text_of(d: dict[str, Any], key: str, limit: int, cap: int) -> str:
    v = d.get(key, "")
    if not isinstance(v, str):
        raise _BadReply(f"error.{key} is a {type(v).__name__}")
    if len(v) > limit:
        raise _BadReply(f"{len(v)} characters of error.{key}")
    return _cap(v, cap)


__all__ = ["RUNTIME_PREFIX", "CellResult", "KernelSession", "local_runtime", "make_sandbox"]
