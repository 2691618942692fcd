"""Sandboxes that can run skyhub's kernel bridge: `make_sandbox` and, for the local backend,
the read-only runtime (`local_runtime`) a bubblewrap sandbox needs to start it.

The guest (skyhub's in-sandbox daemon, as its zipapp `guest.pyz`) and the bridge are copied
into a per-process dir under the local sandbox base (`.runtime-<pid>`, readable by every
sandbox uid), removed when the process exits; dirs of processes that died without that are
removed by the next process that makes one.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from skyhub.errors import SandboxUnavailable, UsageError
from skyhub.sandbox import guest_app
from skyhub.sandbox.base import Sandbox

#: the Python family's image: its Dockerfile and the kernel bridge (`skyhub images build`
#: finds it through the `skyhub.images` entry point)
IMAGE_DIR = Path(__file__).resolve().parent / "image"
OPT = "/opt/skyhub"
SYSTEM_PYTHON = "/usr/bin/python3"


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


RUNTIME_PREFIX = ".runtime-"


@functools.cache
def _runtime_dir() -> str:
    """The guest and the bridge, copied where every sandbox uid can read them: one dir per
    process, removed when it exits; those of processes that died without that are removed
    here."""
    from skyhub.sandbox.local_scratch import make_base

    base = make_base()
    reap_runtime_dirs(base)
    d = base / f"{RUNTIME_PREFIX}{os.getpid()}"
    d.mkdir(mode=0o755, exist_ok=True)
    atexit.register(shutil.rmtree, d, True)
    (d / guest_app.APP_NAME).write_bytes(guest_app.zipapp())
    shutil.copyfile(IMAGE_DIR / "kernel_bridge.py", d / "kernel_bridge.py")
    for name in (guest_app.APP_NAME, "kernel_bridge.py"):
        os.chmod(d / name, 0o644)
    return str(d)


def reap_runtime_dirs(base: Path) -> list[str]:
    """Remove the runtime dirs under `base` whose process is gone; return their names."""
    from skyhub.sandbox.base import pid_alive

    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            pid = entry.name[len(RUNTIME_PREFIX):]
            if entry.name.startswith(RUNTIME_PREFIX) and pid.isdigit() and \
                    int(pid) != os.getpid() and not pid_alive(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.name)
    return removed


def local_runtime() -> tuple[dict[str, str], str]:
    """Read-only mounts that let a bubblewrap sandbox start the kernel bridge, and the Python
    that runs it. This interpreter (its virtualenv under /opt/skyhub/venv, its base Python at
    its own path) when a sandbox uid can read it; else the system's python3 with Debian's
    python3-ipykernel. `SandboxUnavailable` says what to install when neither works."""
    runtime = _runtime_dir()
    mounts = {f"{OPT}/{guest_app.APP_NAME}": f"{runtime}/{guest_app.APP_NAME}",
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
        return sb, ["python3", "-I", "-u", f"{OPT}/kernel_bridge.py"]
    if backend == "local":
        mounts, python = local_runtime()
        sb = skyhub.sandbox.create(backend="local", cpus=cpus, memory_mb=memory_mb,
                                   mounts=mounts, **kwargs)
        if getattr(sb, "isolation", "bwrap") == "none":  # host paths, as they are
            return sb, [sys.executable, "-I", "-u", str(IMAGE_DIR / "kernel_bridge.py")]
        return sb, [python, "-I", "-u", f"{OPT}/kernel_bridge.py"]
    raise UsageError(f"Python envs run kernels on backend 'docker' or 'local' (or 'auto'), "
                     f"not {backend!r}")


__all__ = ["IMAGE_DIR", "OPT", "RUNTIME_PREFIX", "local_runtime", "make_sandbox",
           "reap_runtime_dirs"]
