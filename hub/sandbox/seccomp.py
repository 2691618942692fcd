"""Seccomp filters that deny one process of a sandbox access to another's memory.

Why: a verifier that runs the agent's code (a script the task checks) runs it beside its own
shell; with the same uid and no Yama LSM (this kernel has none), that code could
`PTRACE_ATTACH` the verifier's shell and rewrite its next syscall to `exit_group(0)`, a forged
pass. So no process in a sandbox may use `ptrace`,
`process_vm_readv` or `process_vm_writev`: they fail with EPERM.

- docker: `docker_profile()` is a seccomp profile for `security_opt=["seccomp=<json>"]`. It
  allows every syscall except those three, and keeps the denials of Docker's default profile
  that capabilities do not already enforce for a container without capabilities (keyrings,
  new namespaces, bpf, perf, userfaultfd, kernel modules...), so replacing Docker's default
  profile loses nothing the sandbox relied on.
- local (bubblewrap): `bpf_program()` is the same denial as a classic BPF program, written
  here with struct packing (no libseccomp needed), which `bwrap --seccomp FD` installs
  before it runs the command; `bwrap_prefix()` opens the compiled file on that descriptor.

What this does not cover: `/proc/<pid>/mem` is governed by ptrace's access check, not by the
ptrace syscall; that is why the verifier's shell is also undumpable (see
`skyhub.shell.judge`).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import struct
from pathlib import Path

#: What no sandbox process may call: reading or writing another process's memory.
DENIED = ("ptrace", "process_vm_readv", "process_vm_writev")
#: Docker's default profile denies these to a container without CAP_SYS_ADMIN & co.; a
#: profile that replaces it keeps denying them.
DOCKER_DEFAULT_DENIED = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module",
    "delete_module", "finit_module", "fsconfig", "fsmount", "fsopen", "fspick",
    "get_kernel_syms", "get_mempolicy", "init_module", "ioperm", "iopl", "kcmp",
    "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie", "mbind", "mount",
    "mount_setattr", "move_mount", "move_pages", "nfsservctl", "open_by_handle_at",
    "open_tree", "perf_event_open", "pivot_root", "query_module", "quotactl", "reboot",
    "request_key", "set_mempolicy", "setns", "settimeofday", "stime", "swapoff", "swapon",
    "_sysctl", "syslog", "umount", "umount2", "unshare", "uselib", "userfaultfd", "ustat",
    "vm86", "vm86old")
EPERM, ENOSYS = 1, 38
#: clone() flags that make a namespace (Docker's default profile allows clone only without
#: them, unless the container has CAP_SYS_ADMIN)
_CLONE_NS_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000,
                   0x40000000)


@functools.cache
def docker_profile() -> str:
    """The JSON seccomp profile for skyhub's docker sandboxes (see the module docstring)."""
    rules: list[dict[str, object]] = [
        {"names": list(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM},
        {"names": list(DOCKER_DEFAULT_DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM},
        # clone3's flags sit in memory seccomp cannot read: ENOSYS makes libc use clone()
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS},
    ]
    rules += [{"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
               "args": [{"index": 0, "value": flag, "valueTwo": flag,
                         "op": "SCMP_CMP_MASKED_EQ"}]} for flag in _CLONE_NS_FLAGS]
    return json.dumps({"defaultAction": "SCMP_ACT_ALLOW",
                       "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32",
                                         "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
                       "syscalls": rules}, separators=(",", ":"))


def docker_security_opt() -> str:
    """The `security_opt` entry that installs `docker_profile()`."""
    return "seccomp=" + docker_profile()


# -------------------------------------------------------------------- classic BPF (bwrap)
# struct seccomp_data: int nr; __u32 arch; ... ; BPF opcodes and return values from
# <linux/filter.h> and <linux/seccomp.h>
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO, _RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
#: (AUDIT_ARCH, syscall numbers of DENIED, first number that is not this ABI's) per machine
_ARCHES = {
    "x86_64": (0xC000003E, (101, 310, 311), 0x40000000),  # x32 numbers start at 0x40000000
    "aarch64": (0xC00000B7, (117, 270, 271), None),
}


def bpf_program(machine: str | None = None) -> bytes:
    """The filter as `struct sock_filter[]` bytes: on this machine's ABI, DENIED fail with
    EPERM and everything else is allowed; a syscall of another ABI (32-bit or x32 entry
    points, whose numbers differ) kills the process. ValueError on an unknown machine."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise ValueError(f"no seccomp filter for machine {machine!r}; known: "
                         f"{', '.join(_ARCHES)}")
    arch, numbers, foreign = _ARCHES[machine]
    prog: list[tuple[int, int, int, int]] = [(_LD_W_ABS, 0, 0, 4),  # A = arch
                                             (_JEQ_K, 1, 0, arch),
                                             (_RET_K, 0, 0, _RET_KILL_PROCESS),
                                             (_LD_W_ABS, 0, 0, 0)]  # A = nr
    if foreign is not None:
        prog.append((_JGE_K, len(numbers) + 1, 0, foreign))  # -> kill below
    for i, nr in enumerate(numbers):  # match: jump to the ERRNO return
        prog.append((_JEQ_K, len(numbers) - i + (1 if foreign is not None else 0), 0, nr))
    prog.append((_RET_K, 0, 0, _RET_ALLOW))
    if foreign is not None:
        prog.append((_RET_K, 0, 0, _RET_KILL_PROCESS))
    prog.append((_RET_K, 0, 0, _RET_ERRNO | EPERM))
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


#: the descriptor bwrap reads the filter from (opened by `bwrap_prefix`'s shell)
BWRAP_FD = 9


def bwrap_prefix(directory: str | Path) -> list[str]:
    """An argv prefix that opens the compiled filter (written once into `directory`, which
    must be readable by whoever runs bwrap and out of the sandbox's reach) on `BWRAP_FD`
    and execs the rest: `[*bwrap_prefix(d), "bwrap", "--seccomp", str(BWRAP_FD), ...]`."""
    path = Path(directory) / "seccomp.bpf"
    if not path.is_file():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(bpf_program())
        os.chmod(tmp, 0o444)
        tmp.replace(path)
    return ["/bin/sh", "-c", f'exec "$@" {BWRAP_FD}<"$0"', str(path)]


__all__ = ["BWRAP_FD", "DENIED", "bpf_program", "bwrap_prefix", "docker_profile",
           "docker_security_opt"]
