"""Bubblewrap for the `local` backend: finding it, what this bwrap can do, the sandbox's own
read-only /etc, and the argv that runs one command in fresh namespaces (see local.py's module
docstring for what each mount and flag isolates).

Plain functions of a sandbox's settings: `LocalSandbox` writes the /etc once at creation and
asks for the argv of every command.
"""

from __future__ import annotations

import functools
import glob
import os
import posixpath
import shutil
import subprocess
from pathlib import Path

from skyhub.sandbox import seccomp
from skyhub.sandbox.local_scratch import drop_to

_RO_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: What a sandbox's /etc takes from the host's (read-only; globs allowed): the dynamic
#: linker's cache, Debian's alternatives (awk, which...), python3's own config, and symlinks
#: (time zone, os-release, mtab). Nothing that names the host's users, services or secrets;
#: no /etc/profile or bash.bashrc (shells start with bash's defaults).
ETC_FROM_HOST = ("alternatives", "ld.so.cache", "localtime", "mtab", "os-release", "python3*")
#: What `network=True` adds: name resolution and TLS certificates.
ETC_FOR_NETWORK = ("ca-certificates.conf", "gai.conf", "host.conf", "protocols",
                   "resolv.conf", "services", "ssl/certs", "ssl/openssl.cnf")
_NSSWITCH = "".join(f"{db}: files\n" for db in (
    "passwd", "group", "shadow", "networks", "protocols", "services", "ethers", "rpc",
    "netgroup")) + "hosts: files dns\n"
_bwrap_checked: dict[bool, str] = {}  # as root? -> "" when bwrap works, else why not


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


def bwrap_problem(bwrap: str, uid: int | None) -> str:
    """Why bwrap cannot make namespaces here (e.g. user namespaces are disabled), or ""."""
    key = uid is not None
    if key not in _bwrap_checked:
        try:
            nested = ["--unshare-user", "--disable-userns"] if _disables_userns(
                bwrap) else []
            r = subprocess.run([bwrap, "--unshare-all", *nested, "--die-with-parent",
                                "--ro-bind", "/", "/", "true"], capture_output=True, timeout=30,
                               preexec_fn=lambda: drop_to(uid))
            why = "" if r.returncode == 0 else r.stderr.decode(errors="replace").strip()
        except (OSError, subprocess.SubprocessError) as e:
            why = str(e)
        _bwrap_checked[key] = why or ""
    return _bwrap_checked[key]


@functools.cache
def _disables_userns(bwrap: str) -> bool:
    """Whether this bwrap has `--disable-userns` (0.8 and later): without it a command can
    make a nested user namespace and, inside it, mount what it likes (e.g. unsized tmpfs;
    with a memory cgroup those pages are still charged to the sandbox)."""
    try:
        r = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--disable-userns" in r.stdout + r.stderr


@functools.cache
def _sizes_tmpfs(bwrap: str) -> bool:
    """Whether this bwrap has `--size` (0.5 and later): without it tmpfs mounts are unsized."""
    try:
        r = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--size" in r.stdout + r.stderr


def write_etc(etc: Path, *, uid: int, gid: int, workdir: str, network: bool,
              mounts: dict[str, str]) -> list[tuple[str, str]]:
    """Write a sandbox's /etc at `etc` (bound read-only by `bwrap_argv`): its own files, the
    host's symlinks copied, and empty mount points for what is bound from the host, so that
    an exec costs a handful of mounts. Returns those binds, (host path, path inside)."""
    etc.mkdir(mode=0o755)
    own = {
        "passwd": f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{uid}:{gid}:sandbox:"
                  f"{workdir}:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:"
                  "/usr/sbin/nologin\n",
        "group": f"root:x:0:\nsandbox:x:{gid}:\nnogroup:x:65534:\n",
        "hosts": "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost "
                 "ip6-loopback\n",
        "hostname": "sandbox\n",
        "nsswitch.conf": _NSSWITCH,
    }
    for name, text in own.items():
        (etc / name).write_text(text)
        os.chmod(etc / name, 0o644)

    def matches(patterns: tuple[str, ...]) -> list[str]:
        return [h for p in patterns for h in sorted(glob.glob(os.path.join("/etc", p)))]

    copied = matches(ETC_FROM_HOST)  # their symlinks as symlinks, the rest bound
    bound = matches(ETC_FOR_NETWORK) if network else []  # followed: resolv.conf...
    binds: list[tuple[str, str]] = []
    for inside in copied + bound + [p for p in mounts if p.startswith("/etc/")]:
        place = etc / posixpath.relpath(inside, "/etc")
        place.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        host = mounts.get(inside, inside)
        if inside in copied and os.path.islink(host):
            os.symlink(os.readlink(host), place)
            continue
        if os.path.isdir(host):
            place.mkdir(mode=0o755, exist_ok=True)
        else:
            place.touch(mode=0o644)
        if inside not in mounts:
            binds.append((host, inside))
    return binds


def bwrap_argv(bwrap: str, *, root: Path, work: Path, workdir: str, cwd: str, network: bool,
               etc_binds: list[tuple[str, str]], mounts: dict[str, str], disk_mb: int,
               prlimit: str | None, pids: int, die_with_parent: bool = True) -> list[str]:
    """The argv prefix that runs a command of the sandbox at `root` (its workdir `work` on
    the host, bound at `workdir`) in fresh namespaces, starting in `cwd`."""
    # ptrace and process_vm_* fail with EPERM inside
    argv = [*seccomp.bwrap_prefix(root), bwrap,
            "--seccomp", str(seccomp.BWRAP_FD),
            "--unshare-all", *(["--share-net"] if network else []),
            # no nested user namespace: inside one, `mount -t tmpfs` makes unsized tmpfs
            *(["--unshare-user", "--disable-userns"] if _disables_userns(bwrap) else []),
            *(["--die-with-parent"] if die_with_parent else []), "--new-session",
            "--hostname", "sandbox"]
    for d in _RO_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    argv += ["--ro-bind", str(root / "etc"), "/etc"]
    for host, inside in etc_binds:
        argv += ["--ro-bind-try", host, inside]
    for inside, host in mounts.items():
        argv += ["--ro-bind", host, inside]
    sized = _sizes_tmpfs(bwrap)
    tmp, shm = disk_mb << 20, max(1, disk_mb // 2) << 20
    argv += ["--proc", "/proc",
             # bwrap's /dev is a tmpfs the sandbox could fill: read-only, but for /dev/shm
             "--dev", "/dev", "--remount-ro", "/dev",
             "--perms", "1777", *(["--size", str(shm)] if sized else []), "--tmpfs",
             "/dev/shm", *(["--size", str(tmp)] if sized else []), "--tmpfs", "/tmp",
             "--bind", str(work), workdir,
             # a read-only root: `rm -rf /` cannot delete the /lib and /bin symlinks that
             # every later program in this namespace needs
             "--remount-ro", "/", "--chdir", cwd]
    if prlimit:  # in the new user namespace NPROC counts only the sandbox's tasks
        argv += [prlimit, f"--nproc={pids}", "--"]
    return argv
