"""The terminal verifier against ptrace, and long commands.

ptrace: the verifier ran the agent's script beside its own shell, as the same uid, and the
script `PTRACE_ATTACH`ed the verifier's `bash -c` and rewrote its next syscall to
`exit_group(0)`: reward 1.0 for a task the agent never did. Sandboxes now deny ptrace and
process_vm_* (`skyhub.sandbox.seccomp`), so the same attack scores 0; the attack itself is
checked to work against an unsandboxed bash on this host, so the 0 is the sandbox's doing.

Long commands: a command over ~3 KB lost the end of its line in the terminal (canonical mode
keeps 4095 characters of a line); long commands now go in as short lines.
"""

from __future__ import annotations

import hashlib
import platform
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest

import skyhub
from skyhub.shell.session import ShellSession

pytestmark = [pytest.mark.hostile, pytest.mark.slow]

# Walks up to the nearest `bash -c` ancestor (the verifier's shell), attaches, stops it at
# its next syscall and turns that syscall into exit_group(0). Prints what ptrace said.
ATTACK = r'''
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
def parent(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])
def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().split(b"\0")
def is_bash_c(c):
    return len(c) > 1 and c[0].endswith(b"bash") and c[1] == b"-c"
pid = parent(os.getpid())
while pid > 1 and not is_bash_c(cmdline(pid)):
    pid = parent(pid)
if pid <= 1:
    sys.exit("no bash -c ancestor")
try:  # the other way in: its memory through /proc, as a debugger without ptrace would
    open(f"/proc/{pid}/mem", "r+b").close()
    print("mem opened", flush=True)
except OSError as e:
    print("mem refused", e.errno, flush=True)
if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
    print("attach refused, errno", ctypes.get_errno(), flush=True)
    sys.exit(0)
WALL = 0x40000000
os.waitpid(pid, WALL)
libc.ptrace(24, pid, None, None)  # PTRACE_SYSCALL: stop at the next syscall
os.waitpid(pid, WALL)
regs = (ctypes.c_ulong * 27)()
libc.ptrace(12, pid, None, ctypes.byref(regs))  # PTRACE_GETREGS
regs[15], regs[14] = 231, 0  # orig_rax = exit_group, rdi = 0
libc.ptrace(13, pid, None, ctypes.byref(regs))  # PTRACE_SETREGS
libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
print("verifier rewritten", flush=True)
'''
#: the task: the verifier runs the agent's script, then fails whatever it did
VERIFY = "#!/bin/bash\nbash /work/agent.sh\necho 'FAIL: this task is never solved'\nexit 1\n"


def _x86_64() -> None:
    assert platform.machine() == "x86_64", "the attack program's registers are x86_64's"


def test_the_attack_forges_an_unsandboxed_verifier(tmp_path: Path) -> None:
    """The attack is real: against a plain `bash -c` on this host, a verifier that always
    fails exits 0."""
    _x86_64()
    (tmp_path / "attack.py").write_text(ATTACK)
    (tmp_path / "agent.sh").write_text(f"{sys.executable} {tmp_path}/attack.py\n")
    r = subprocess.run(["bash", "-c", f"bash {tmp_path}/agent.sh\nexit 1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)


def test_a_ptrace_attack_on_the_verifier_scores_zero(backend: str, tmp_path: Path) -> None:
    _x86_64()
    task = tmp_path / "forge-by-ptrace"
    task.mkdir()
    (task / "instruction.md").write_text("Nothing can solve this task.\n")
    (task / "verify.sh").write_text(VERIFY)
    with skyhub.make("terminal", data_dir=task, backend=backend) as env:
        env.reset(seed=0)
        write = (f"cat > /work/attack.py <<'SKYHUB_EOF'\n{ATTACK}\nSKYHUB_EOF\n"
                 "echo 'python3 /work/attack.py' > /work/agent.sh; echo ok")
        obs, reward, *_ = env.step(f"<bash>{write}</bash>")
        assert "ok" in obs and reward == 0.0, obs
        _, reward, *_, info = env.step("<done/>")
    out = info["verifier_output"]
    assert "attach refused, errno 1" in out, out  # EPERM
    # and its memory cannot be written through /proc either: the verifier's shell runs
    # undumpable (EACCES)
    assert "mem refused 13" in out, out
    assert "verifier rewritten" not in out, out
    assert (reward, info["verifier_exit_code"], info["infra_error"]) == (0.0, 1, False), info


#: passes only if something recreates /work/flag while it looks: a daemon the agent left
VERIFY_DAEMON = ("#!/bin/bash\nrm -f /work/flag\nfor i in $(seq 20000); do\n"
                 "  [ -e /work/flag ] && { echo 'a daemon wrote the flag'; exit 0; }\ndone\n"
                 "exit 1\n")


def test_the_agents_processes_are_gone_before_the_verifier(backend: str,
                                                            tmp_path: Path) -> None:
    task = tmp_path / "forge-by-daemon"
    task.mkdir()
    (task / "instruction.md").write_text("Nothing can solve this task.\n")
    (task / "verify.sh").write_text(VERIFY_DAEMON)
    daemon = ("setsid bash -c 'trap \"\" TERM HUP INT; (while :; do : > /work/flag; done) "
              "</dev/null >/dev/null 2>&1 &' </dev/null >/dev/null 2>&1; "
              "for i in $(seq 1000); do [ -e /work/flag ] && break; done; ls /work/flag")
    with skyhub.make("terminal", data_dir=task, backend=backend) as env:
        env.reset(seed=0)
        obs, *_ = env.step(f"<bash>{daemon}</bash>")
        assert "/work/flag" in obs and "exit 0" in obs, obs  # the daemon runs
        _, reward, *_, info = env.step("<done/>")
    assert (reward, info["verifier_exit_code"]) == (0.0, 1), info


PTRACE_OWN = r'''python3 - <<'EOF'
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
r = libc.ptrace(16, pid, None, None)
print("attach", r, "errno", ctypes.get_errno())
for call in ("process_vm_readv", "process_vm_writev"):
    fn = getattr(libc, call)
    fn.restype = ctypes.c_ssize_t
    buf = ctypes.create_string_buffer(8)
    iov = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)
    print(call, fn(pid, iov, 1, iov, 1, 0), "errno", ctypes.get_errno())
os.kill(pid, 9)
os.waitpid(pid, 0)
EOF'''


def test_ptrace_of_the_agents_own_process_is_refused(shell: ShellSession) -> None:
    r = shell.run(PTRACE_OWN, timeout=30)
    assert r.exit_code == 0, r
    lines = r.output.split("\n")
    assert "attach -1 errno 1" in lines, r.output
    assert "process_vm_readv -1 errno 1" in lines, r.output
    assert "process_vm_writev -1 errno 1" in lines, r.output


# --------------------------------------------------------------------- long commands
@pytest.mark.parametrize("size", [3 << 10, 8 << 10, 64 << 10])
def test_long_commands_arrive_whole(shell: ShellSession, size: int) -> None:
    rng = random.Random(size)
    for _ in range(20):
        head = "p='"
        tail = "'; printf %s \"$p\" | sha256sum; printf '%s\\n' \"${#p}\""
        payload = "".join(rng.choices(string.ascii_letters + string.digits,
                                      k=size - len(head) - len(tail)))
        command = head + payload + tail
        assert len(command) == size
        r = shell.run(command, timeout=60)
        assert (r.exit_code, r.timed_out, r.restarted) == (0, False, None), r.output[-300:]
        digest = hashlib.sha256(payload.encode()).hexdigest()
        assert r.output.split() == [digest, "-", str(len(payload))], r.output[-300:]
