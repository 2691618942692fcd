"""A Jupyter kernel inside a sandbox, driven from the host: `KernelSession`.

The kernel (ipykernel) and its client (jupyter_client) both run *inside* the sandbox, under
skyhub's kernel bridge (`skyhub/sandbox/images/python/kernel_bridge.py`); the host talks to the
bridge over the sandbox's process channel (`Sandbox.spawn`). So the sandbox needs no network,
the kernel's ZeroMQ ports never leave it, and the same code drives Docker and local sandboxes:

- docker: skyhub's `python` image (`skyhub images build`), which has ipykernel from Debian;
- local (bubblewrap): this interpreter's runtime (the virtualenv and its base Python) and the
  bridge are mounted read-only under /opt/skyhub; the kernel sees no host files beyond them
  and the system directories, and no network.

The bridge keeps a spare kernel warm, so `reset()` (a clean kernel and workdir for the next
episode) costs milliseconds instead of a kernel's cold start.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyhub.errors import InfraError, SandboxUnavailable
from skyhub.sandbox.base import ChannelBroken, Sandbox

_SANDBOX_PKG = Path(__file__).resolve().parents[2] / "hub" / "sandbox"
OPT = "/opt/skyhub"
SYSTEM_PYTHON = "/usr/bin/python3"
#: Seconds the bridge may take beyond a cell's timeout (interrupt grace, kernel restart).
BRIDGE_SLACK_S = 90.0


def _sandbox_files() -> tuple[Path, Path]:
    """The host paths of the agent and the kernel bridge (installed or source tree)."""
    import skyhub.sandbox

    pkg = Path(skyhub.sandbox.__file__).resolve().parent
    if not (pkg / "agent.py").is_file():  # pragma: no cover - a broken install
        pkg = _SANDBOX_PKG
    return pkg / "agent.py", pkg / "images" / "python" / "kernel_bridge.py"


def _readable_by_others(path: str) -> bool:
    """Whether a sandbox's own uid (root runs each sandbox as a fresh unprivileged uid) can
    reach `path`: every ancestor searchable and the path itself readable by others."""
    p = Path(path).resolve()
    try:
        if not p.stat().st_mode & stat.S_IROTH:
            return False
        return all(q.stat().st_mode & stat.S_IXOTH for q in p.parents)
    except OSError:
        return False


@functools.cache
def _system_python_has_ipykernel() -> bool:
    try:
        return subprocess.run([SYSTEM_PYTHON, "-c", "import ipykernel, jupyter_client"],
                              capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.cache
def _runtime_dir() -> str:
    """The agent and the bridge, copied where every sandbox uid can read them."""
    from skyhub.sandbox.local_scratch import make_base

    d = make_base() / f".runtime-{os.getpid()}"
    d.mkdir(mode=0o755, exist_ok=True)
    for src in _sandbox_files():
        shutil.copyfile(src, d / src.name)
        os.chmod(d / src.name, 0o644)
    return str(d)


def local_runtime() -> tuple[dict[str, str], str]:
    """Read-only mounts that let a bubblewrap sandbox start the kernel bridge, and the Python
    that runs it. This interpreter (its virtualenv under /opt/skyhub/venv, its base Python at
    its own path) when a sandbox uid can read it; else the system's python3 with Debian's
    python3-ipykernel. `SandboxUnavailable` says what to install when neither works."""
    runtime = _runtime_dir()
    mounts = {f"{OPT}/agent.py": f"{runtime}/agent.py",
              f"{OPT}/kernel_bridge.py": f"{runtime}/kernel_bridge.py"}
    own = [sys.prefix, sys.base_prefix]
    if os.geteuid() != 0 or all(_readable_by_others(p) for p in own):
        python = sys.executable
        if sys.prefix != sys.base_prefix:
            mounts[f"{OPT}/venv"] = sys.prefix
            python = f"{OPT}/venv/bin/{Path(sys.executable).name}"
        base = sys.base_prefix
        if base != "/usr" and not base.startswith("/usr/"):
            mounts[base] = base
        return mounts, python
    if _system_python_has_ipykernel():
        return mounts, SYSTEM_PYTHON
    raise SandboxUnavailable(
        f"local Python sandboxes cannot run this interpreter ({sys.executable}: other users "
        f"cannot read it, and sandboxes run as their own uid) and {SYSTEM_PYTHON} has no "
        "ipykernel; install it (apt-get install python3-ipykernel python3-numpy python3-sympy,"
        " or `bash scripts/services.sh`) or use backend='docker'")


def make_sandbox(backend: str = "auto", *, cpus: float = 1.0, memory_mb: int = 2048,
                 **kwargs: Any) -> tuple[Sandbox, list[str]]:
    """A sandbox that can run kernels, and the argv that starts the bridge in it."""
    import skyhub.sandbox

    if backend == "auto":
        backend = "docker" if skyhub.sandbox.docker_available() else "local"
    if backend == "docker":
        from skyhub.sandbox import images

        sb = skyhub.sandbox.create(image=kwargs.pop("image", None) or images.image_tag("python"),
                                   backend="docker", cpus=cpus, memory_mb=memory_mb, **kwargs)
        return sb, ["python3", "-u", f"{OPT}/kernel_bridge.py"]
    if backend == "local":
        mounts, python = local_runtime()
        sb = skyhub.sandbox.create(backend="local", cpus=cpus, memory_mb=memory_mb,
                                   mounts=mounts, **kwargs)
        if getattr(sb, "isolation", "bwrap") == "none":  # host paths, as they are
            return sb, [sys.executable, "-u", str(_sandbox_files()[1])]
        return sb, [python, "-u", f"{OPT}/kernel_bridge.py"]
    raise ValueError(f"Python envs run kernels on backend 'docker' or 'local' (or 'auto'), "
                     f"not {backend!r}")


@dataclass(frozen=True)
class CellResult:
    """What one cell did. `restarted` says why the kernel was replaced (its state is gone)."""

    stdout: str = ""
    stderr: str = ""
    result: str = ""
    error: dict[str, str] | None = None
    timed_out: bool = False
    restarted: str | None = None
    duration_s: float = 0.0

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


class KernelSession:
    """One sandbox with a Jupyter kernel in it, reused across episodes.

    `run(code)` executes a cell; `reset()` gives a fresh kernel and an empty workdir.
    Raises `InfraError` when the sandbox itself fails (not for anything the code does).
    """

    def __init__(self, backend: str = "auto", *, cpus: float = 1.0, memory_mb: int = 2048,
                 **sandbox_kwargs: Any) -> None:
        self.sandbox, self._argv = make_sandbox(backend, cpus=cpus, memory_mb=memory_mb,
                                                **sandbox_kwargs)
        self._chan: Any = None
        try:
            self._clean = self.sandbox.snapshot()
            self._start_bridge()
        except BaseException:
            self.sandbox.close()
            raise

    @property
    def backend(self) -> str:
        return self.sandbox.backend

    def _start_bridge(self) -> None:
        try:
            chan = self.sandbox.spawn(self._argv)
            reply = chan.request({"op": "reset"}, 120)
        except ChannelBroken as e:
            raise InfraError(f"the Jupyter kernel bridge did not start in sandbox "
                             f"{self.sandbox.id} ({e}); with backend='docker' run `skyhub "
                             "images build`, with 'local' install the 'python' extra") from e
        if not reply.get("ok"):
            chan.close()
            raise InfraError(f"no Jupyter kernel in sandbox {self.sandbox.id}: "
                             f"{reply.get('type')}: {reply.get('error')}")
        self._chan = chan

    def _request(self, req: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """The bridge's reply; None when the bridge died or could not serve the request (the
        agent may have wrecked its sandbox namespace, e.g. `rm -rf /` in a local sandbox
        removes the /lib symlinks): it is then replaced by a new one, in a new namespace."""
        if self._chan is None:
            self._start_bridge()
        try:
            reply = self._chan.request(req, timeout)
        except ChannelBroken:
            reply = None
        if reply is None or not reply.get("ok"):
            self._drop_bridge()
            self._start_bridge()  # InfraError when even a new bridge cannot start
            return None
        return reply

    def _drop_bridge(self) -> None:
        chan, self._chan = self._chan, None
        if chan is not None:
            chan.close()

    def run(self, code: str, timeout: float = 10.0, max_output: int = 8192) -> CellResult:
        """Execute `code` in the kernel. Past `timeout` s it is interrupted (state kept); a
        kernel that ignores the interrupt or dies is replaced (`restarted` says why)."""
        start = time.monotonic()
        reply = self._request({"op": "execute", "code": code, "timeout": timeout,
                               "max_output": max_output}, timeout + BRIDGE_SLACK_S)
        if reply is None:
            return CellResult(restarted="the Python runtime in the sandbox was killed",
                              duration_s=time.monotonic() - start)
        return CellResult(stdout=reply["stdout"], stderr=reply["stderr"],
                          result=reply["result"], error=reply["error"],
                          timed_out=bool(reply["timed_out"]), restarted=reply["restarted"],
                          duration_s=float(reply["duration_s"]))

    def reset(self, *, cold: bool = False) -> bool:
        """A fresh kernel and the workdir as it was at creation. Returns whether the kernel
        came warm from the bridge's spare (the usual case) rather than a cold start
        (`cold=True` forces one: what a reset would cost without the spare)."""
        reply = self._request({"op": "reset", "cold": cold}, 120)
        pooled = bool(reply and reply.get("pooled"))  # None: a new bridge, a cold kernel
        self.sandbox.restore(self._clean, kill_processes=False)
        return pooled

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._drop_bridge()
        self.sandbox.close()

    def __enter__(self) -> KernelSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["CellResult", "KernelSession", "local_runtime", "make_sandbox"]
