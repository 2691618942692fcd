"""The docker backend against a real daemon: isolation, limits, files, snapshots, orphans."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyhub.errors import InfraError, SandboxUnavailable, SkyhubError
from skyhub.sandbox import base, images
from skyhub.sandbox import docker_client as dsb
from skyhub.sandbox.docker import DockerSandbox
from skyhub.sandbox.docker_channel import SNAPSHOT_DIR

pytestmark = [pytest.mark.docker]

LISTING = "find . -type f -exec sha256sum {} + | sort -k2; find . -type d | sort"


@pytest.fixture(scope="module")
def image(docker_daemon: None) -> str:
    """skyhub's default image, built if missing (cached across runs by its content hash)."""
    return images.build(["default"], quiet=True)[0]


@pytest.fixture(scope="module")
def sb(image: str) -> Iterator[DockerSandbox]:
    """One warm sandbox for the tests that only run commands and don't change its limits."""
    with DockerSandbox() as box:
        yield box


@pytest.fixture(scope="module")
def nopython_image(image: str) -> Iterator[str]:
    """An image without python3, to exercise the Docker-exec fallback."""
    import docker.errors

    client = dsb.get_client()
    tag = f"skyhub-test/nopython:{os.getpid()}"  # per session: test runs may share a daemon
    dockerfile = b"FROM debian:bookworm-slim\nRUN rm -f /usr/bin/python3*\n"
    client.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True, pull=False)
    yield tag
    with contextlib.suppress(docker.errors.NotFound):
        client.images.remove(tag, force=True)


@pytest.fixture(scope="module")
def foreign_image(image: str) -> Iterator[str]:
    """skyhub's image under another name: treated as a foreign image (agent copied in)."""
    import docker.errors

    client = dsb.get_client()
    tag = f"skyhub-test/foreign:{os.getpid()}"
    client.images.get(image).tag(tag)
    yield tag
    with contextlib.suppress(docker.errors.NotFound):
        client.images.remove(tag)


# ----------------------------------------------------------------------------- commands
def test_exec_reports_exit_codes_for_shell_strings_and_argv(sb: DockerSandbox) -> None:
    assert sb.exec("exit 3").exit_code == 3
    assert sb.exec("true").ok
    r = sb.exec(["python3", "-c", "import sys; print(sys.argv[1]); sys.exit(5)", "a b; c"])
    assert (r.exit_code, r.stdout) == (5, "a b; c\n")
    assert sb.exec(["/no/such/binary"]).exit_code == 127
    assert sb.exec("kill -9 $$").exit_code == 137


def test_exec_honours_cwd_env_and_stdin(sb: DockerSandbox) -> None:
    sb.exec("mkdir -p sub/dir")
    assert sb.exec("pwd").stdout == "/work\n"
    assert sb.exec("pwd", cwd="sub/dir").stdout == "/work/sub/dir\n"
    assert sb.exec("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sb.exec("echo $FOO-$HOME", env={"FOO": "bar"}).stdout == "bar-/home/sandbox\n"
    assert sb.exec("tr a-z A-Z", stdin="hello").stdout == "HELLO"
    blob = bytes(range(256)) * 100
    assert sb.exec("sha256sum", stdin=blob).stdout.split()[0] == hashlib.sha256(blob).hexdigest()


def test_stdout_and_stderr_are_separate(sb: DockerSandbox) -> None:
    r = sb.exec("echo to-out; echo to-err >&2; echo more-out")
    assert r.stdout == "to-out\nmore-out\n"
    assert r.stderr == "to-err\n"


def test_commands_run_as_non_root_user(sb: DockerSandbox) -> None:
    assert sb.exec("id -u").stdout.strip() == "1000"
    assert sb.exec("id -un").stdout.strip() == "sandbox"
    # and without capabilities or a way to gain them
    assert sb.exec("grep CapEff /proc/self/status").stdout.split()[1] == "0000000000000000"


def test_timeout_kills_the_process_tree(sb: DockerSandbox) -> None:
    r = sb.exec("sleep 1000 & sleep 1000", timeout=2)
    assert r.timed_out and not r.ok
    assert r.duration_s < 10
    assert "sleep 1000" not in sb.exec("ps -eo args").stdout


def test_huge_output_is_capped_with_a_marker(sb: DockerSandbox) -> None:
    r = sb.exec("yes | head -c 200000000; echo done >&2", timeout=120)
    marker = "[... skyhub: "
    assert marker in r.stdout
    assert len(r.stdout) <= sb.max_output + 100
    assert r.stdout.startswith("y\ny\n") and r.stderr == "done\n"


def test_agent_killed_by_a_command_is_restarted(sb: DockerSandbox) -> None:
    r = sb.exec("kill -9 -1")  # kills every process of the sandbox user, the agent included
    assert r.exit_code == 137 and "agent was killed" in r.stderr
    assert sb.exec("echo back").stdout == "back\n"
    assert sb.alive()


FORGER = r"""
import base64, json, os, struct, time
me = str(os.getpid())
for p in os.listdir("/proc"):
    try:
        if p != me and b"guest.pyz" in open(f"/proc/{p}/cmdline", "rb").read():
            agent = p
    except OSError:
        pass
fake = json.dumps({"ok": True, "id": 999999, "exit_code": 0, "timed_out": False,
                   "stdout": base64.b64encode(b"ALL TESTS PASSED").decode(), "stderr": "",
                   "duration_s": 0.1}).encode()
time.sleep(1)
try:
    with open(f"/proc/{agent}/fd/1", "wb") as f:
        f.write(struct.pack(">I", len(fake)) + fake)
    print("injected")
except OSError as e:
    print("refused", e)
"""


def test_background_process_cannot_forge_the_agents_replies(sb: DockerSandbox) -> None:
    sb.write_file("forger.py", FORGER)
    sb.exec("python3 forger.py > forger.log 2>&1 &")
    # the command is running while the forger tries: it ends only once the forger has
    # written its verdict (at its exit), however slowly a loaded machine starts python3
    r = sb.exec("for i in $(seq 400); do [ -s forger.log ] && break; sleep 0.1; done; "
                "echo real; exit 1", timeout=60)
    assert (r.exit_code, r.stdout) == (1, "real\n")
    assert sb.read_file("forger.log").startswith(b"refused")


def test_concurrent_calls_on_one_sandbox_are_serialized(sb: DockerSandbox) -> None:
    results: list[str] = []

    def work(i: int) -> None:
        results.append(sb.exec(f"echo {i}").stdout)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted(f"{i}\n" for i in range(16))


def test_a_vanished_container_is_an_infra_error(image: str) -> None:
    with DockerSandbox() as box:
        box.container.remove(force=True)
        with pytest.raises(InfraError, match="create a new sandbox"):
            box.exec("true")
        assert not box.alive()


# ---------------------------------------------------------------------------- isolation
@pytest.fixture
def host_server() -> Iterator[int]:
    """A TCP server on the host's every address; yields its port."""
    srv = socket.socket()
    srv.bind(("0.0.0.0", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.sendall(b"pong")
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    srv.close()


GATEWAY = ("import socket, struct\nfor line in list(open('/proc/net/route'))[1:]:\n"
           "    f = line.split()\n    if f[1] == '00000000':\n"
           "        print(socket.inet_ntoa(struct.pack('<L', int(f[2], 16))))")


def test_network_is_off_by_default_and_on_when_asked(image: str, host_server: int) -> None:
    port = host_server
    with DockerSandbox(network=True) as online:
        host = online.exec(["python3", "-c", GATEWAY]).stdout.strip()  # the host, via docker0
        assert host
        probe = ["python3", "-c", "import socket, sys; s = socket.create_connection("
             "(sys.argv[1], int(sys.argv[2])), timeout=2); print(s.recv(4).decode())",
             host, str(port)]
        r = online.exec(probe, timeout=10)
        assert r.stdout == "pong\n", r  # the probe can tell a reachable host
    with DockerSandbox() as offline:
        r = offline.exec(probe, timeout=10)
        assert r.exit_code != 0 and "pong" not in r.stdout
        assert offline.exec("cat /sys/class/net/*/operstate | wc -l").stdout.strip() == "1"


def test_memory_hog_is_killed_at_the_limit(image: str) -> None:
    with DockerSandbox(memory_mb=128) as box:
        r = box.exec(["python3", "-c", "x = b'x' * (1 << 30); print(len(x))"], timeout=60)
        assert r.exit_code == 137 or "MemoryError" in r.stderr, r
        assert "1073741824" not in r.stdout
        assert box.exec("echo ok").stdout == "ok\n"


def test_fork_bomb_is_contained(image: str) -> None:
    with DockerSandbox(pids=64) as box:
        r = box.exec(["bash", "-c", ":(){ :|:& };:"], timeout=5)
        assert not r.ok
        assert box.exec("echo ok").stdout == "ok\n"
        assert int(box.exec("ps -e --no-headers | wc -l").stdout) < 10
    assert subprocess.run(["true"]).returncode == 0  # the host still forks


def test_writes_outside_the_workdir_stay_in_the_container(sb: DockerSandbox) -> None:
    name = f"/tmp/skyhub-escape-{uuid.uuid4().hex}"
    assert sb.exec(f"echo inside > {name} && cat {name}").stdout == "inside\n"
    sb.write_file(f"../..{name}-2", "x")
    assert sb.read_file(f"{name}-2") == b"x"
    assert not os.path.exists(name) and not os.path.exists(f"{name}-2")
    assert sb.exec("touch /etc/x").exit_code != 0  # the system is not the user's


# -------------------------------------------------------------------------------- files
def test_files_round_trip_including_binary_and_directories(sb: DockerSandbox,
                                                           tmp_path: Path) -> None:
    blob = os.urandom(300_000)
    sb.write_file("rt/bin.dat", blob)
    sb.write_file("rt/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert sb.read_file("rt/bin.dat") == blob
    assert sb.read_file("/work/rt/bin.dat") == blob
    assert sb.exec("./rt/run.sh").stdout == "ran\n"
    src = tmp_path / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n")
    (src / "data.bin").write_bytes(blob[:1000])
    sb.upload(src, "up/proj")  # a directory's contents go into dest
    assert sb.exec("cat up/proj/pkg/mod.py && stat -c %U up/proj/data.bin").stdout == \
        "X = 1\nsandbox\n"
    sb.upload(src / "data.bin")
    assert sb.read_file("data.bin") == blob[:1000]
    sb.exec("ln -s /etc/passwd up/proj/abs-link")
    sb.download("up/proj", tmp_path / "back")
    assert (tmp_path / "back/pkg/mod.py").read_text() == "X = 1\n"
    assert not (tmp_path / "back/abs-link").exists()  # untrusted links are skipped
    assert (tmp_path / "back/data.bin").read_bytes() == blob[:1000]
    sb.download("rt/bin.dat", tmp_path / "one")
    assert (tmp_path / "one/bin.dat").read_bytes() == blob


def test_read_file_errors_name_the_problem(sb: DockerSandbox) -> None:
    with pytest.raises(FileNotFoundError):
        sb.read_file("no/such/file")
    sb.exec("mkdir -p adir")
    with pytest.raises(IsADirectoryError, match="download"):
        sb.read_file("adir")


# ----------------------------------------------------------------------------- snapshots
def test_restore_gives_back_exactly_the_snapshot_files(image: str) -> None:
    with DockerSandbox() as box:
        box.exec("mkdir -p d/e && for i in $(seq 100); do echo $i > f$i; done; "
                 "echo deep > d/e/deep; chmod 600 f1")
        before = box.exec(LISTING).stdout
        snap = box.snapshot()
        box.exec("for i in $(seq 1 30); do echo changed > f$i; done; "
                 "for i in $(seq 31 60); do rm f$i; done; "
                 "for i in $(seq 1 40); do echo new > n$i; done; rm -r d; mkdir z")
        assert box.exec(LISTING).stdout != before
        box.restore(snap)
        assert box.exec(LISTING).stdout == before
        assert box.exec("stat -c %a f1").stdout == "600\n"
        # and again: a snapshot can be restored many times
        box.exec("rm -rf ./*")
        box.restore(snap)
        assert box.exec(LISTING).stdout == before


def test_restore_kills_leftover_background_processes(image: str) -> None:
    with DockerSandbox() as box:
        snap = box.snapshot()
        box.exec("(setsid sleep 1000 >/dev/null 2>&1 &); nohup sleep 999 >/dev/null 2>&1 &")
        assert "sleep 1000" in box.exec("ps -eo args").stdout
        box.restore(snap)
        ps = box.exec("ps -eo args").stdout
        assert "sleep 1000" not in ps and "sleep 999" not in ps
        assert box.exec("echo ok").stdout == "ok\n"


def test_snapshots_cannot_be_tampered_with_or_mixed_up(image: str) -> None:
    with DockerSandbox() as box, DockerSandbox() as other:
        box.write_file("keep.txt", "clean")
        snap = box.snapshot()
        r = box.exec(f"echo evil > {SNAPSHOT_DIR}/{snap.id}.tar || rm -rf {SNAPSHOT_DIR}")
        assert r.exit_code != 0
        box.write_file("keep.txt", "dirty")
        box.restore(snap)
        assert box.read_file("keep.txt") == b"clean"
        with pytest.raises(ValueError, match="not of"):
            other.restore(snap)


# ---------------------------------------------------------------------- foreign images
def test_foreign_image_gets_the_agent_and_a_writable_workdir(foreign_image: str) -> None:
    with DockerSandbox(foreign_image, workdir="/data/proj") as box:
        assert box.exec("pwd; id -u").stdout == "/data/proj\n1000\n"
        box.write_file("x.txt", "ok")
        assert box.read_file("/data/proj/x.txt") == b"ok"
    with DockerSandbox(foreign_image, workdir="/tmp") as box:  # writable already: untouched
        assert box.exec("stat -c %a .").stdout == "1777\n"
    with DockerSandbox(foreign_image, user="root") as box:  # root: restore spares pid 1's child
        assert box.exec("id -u").stdout == "0\n"
        snap = box.snapshot()
        box.exec("sleep 500 >/dev/null 2>&1 &")
        box.restore(snap)
        assert box.exec("echo alive").stdout == "alive\n"
        assert "sleep 500" not in box.exec("ps -eo args").stdout


def test_image_without_python_falls_back_to_docker_exec(nopython_image: str,
                                                        tmp_path: Path) -> None:
    with DockerSandbox(nopython_image) as box:
        assert box._fallback is not None
        r = box.exec("echo out; echo err >&2; exit 7")
        assert (r.exit_code, r.stdout, r.stderr) == (7, "out\n", "err\n")
        assert box.exec("cat", stdin=b"piped").stdout == "piped"
        r = box.exec("sleep 100", timeout=1)
        assert r.timed_out and r.duration_s < 10
        box.write_file("d/f.bin", b"\x00\x01")
        assert box.read_file("d/f.bin") == b"\x00\x01"
        with pytest.raises(FileNotFoundError):
            box.read_file("nope")
        with pytest.raises(IsADirectoryError):
            box.read_file("d")
        snap = box.snapshot()
        box.exec("rm -rf d; touch junk; sleep 300 >/dev/null 2>&1 &")
        box.restore(snap)
        assert box.exec("ls -A").stdout == "d\n"
        assert "sleep 300" not in box.exec("ps -eo args").stdout
        box.download("d", tmp_path / "d")
        assert (tmp_path / "d/f.bin").read_bytes() == b"\x00\x01"


# --------------------------------------------------------------------- labels and reap
def test_containers_carry_owner_labels(image: str) -> None:
    with DockerSandbox(pool="p1") as box:
        labels = dsb.get_client().containers.get(box.container.id).labels
        assert labels[base.LABEL] == "1"
        assert labels[base.LABEL_OWNER_PID] == str(os.getpid())
        assert labels[base.LABEL_OWNER_HOST] == socket.gethostname()
        assert labels[base.LABEL_POOL] == "p1"
        assert abs(float(labels[base.LABEL_CREATED]) - time.time()) < 120
        listed = {s["name"]: s for s in dsb.list_sandboxes()}
        assert listed[box.name]["owner_pid"] == os.getpid()


def _fake_container(image: str, pid: int, host: str, age_s: float) -> object:
    labels = dict(base.owner_labels(), **{base.LABEL_OWNER_PID: str(pid),
                                          base.LABEL_OWNER_HOST: host,
                                          base.LABEL_CREATED: f"{time.time() - age_s:.3f}"})
    return dsb.get_client().containers.create(image, ["sleep", "infinity"], labels=labels,
                                              name=f"skyhub-test-{uuid.uuid4().hex[:10]}",
                                              network_mode="none")


def test_reap_removes_orphans_of_dead_owners_only(reaping: None, image: str) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert not base.pid_alive(dead.pid)
    orphan = _fake_container(image, dead.pid, socket.gethostname(), age_s=60)
    young = _fake_container(image, dead.pid, socket.gethostname(), age_s=0)
    elsewhere = _fake_container(image, dead.pid, "another-host", age_s=60)
    try:
        with DockerSandbox() as live:
            assert orphan.name in dsb.reap(older_than_s=30, dry_run=True)
            assert dsb.get_client().containers.get(orphan.id)  # dry run removed nothing
            removed = dsb.reap(older_than_s=30)
            assert orphan.name in removed
            assert young.name not in removed and elsewhere.name not in removed
            assert live.name not in removed and live.exec("true").ok
            names = {c.name for c in dsb.get_client().containers.list(all=True,
                                                                       ignore_removed=True)}
            assert orphan.name not in names and young.name in names
    finally:
        for c in (orphan, young, elsewhere):
            with contextlib.suppress(Exception):
                c.remove(force=True)


def test_close_is_idempotent_and_removes_the_container(image: str) -> None:
    import docker.errors

    box = DockerSandbox()
    cid = box.container.id
    box.close()
    box.close()
    assert box.closed
    with pytest.raises(docker.errors.NotFound):
        dsb.get_client().containers.get(cid)
    with pytest.raises(SkyhubError):
        box.exec("true")


def test_missing_image_says_how_to_build_it(image: str) -> None:
    with pytest.raises(SandboxUnavailable, match="skyhub images build"):
        DockerSandbox("skyhub/default:0000missing0")


def test_no_daemon_says_how_to_start_docker(image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dsb, "_client", None)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxUnavailable, match=r"services\.sh"):
        DockerSandbox()


def test_image_tag_follows_the_dockerfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "default").mkdir()
    (tmp_path / "default" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    monkeypatch.setattr(images, "IMAGES_DIR", tmp_path)
    first = images.image_tag()
    assert first.startswith("skyhub/default:") and first == images.image_tag()
    (tmp_path / "default" / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN true\n")
    assert images.image_tag() != first


def test_build_without_the_base_image_says_how_to_seed_it() -> None:
    import docker.errors

    class NoImages:
        class images:  # mimics docker.DockerClient.images
            @staticmethod
            def get(ref: str) -> None:
                raise docker.errors.ImageNotFound(ref)

    with pytest.raises(SandboxUnavailable, match=r"debian:bookworm-slim.*scripts/services\.sh"):
        images.build(["default"], quiet=True, client=NoImages())
