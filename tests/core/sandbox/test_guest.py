"""The guest (skyhub's in-sandbox daemon) on the host: command running, output capping, the
wire protocol, tar transfer and snapshot/restore of a directory."""

from __future__ import annotations

import base64
import io
import os
import resource
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyhub.sandbox import guest_app
from skyhub.sandbox.guest import procs, tars, trees
from skyhub.sandbox.guest import server as wire

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from proc_helpers import processes_with, unique_seconds


# ----------------------------------------------------------------------- run_command
@pytest.mark.parametrize(("cmd", "code"), [
    ("exit 0", 0),
    ("exit 3", 3),
    ("no-such-program-skyhub", 127),      # the shell reports it
    (["no-such-program-skyhub"], 127),    # exec fails before any shell
    ("kill -9 $$", 128 + 9),
    ("kill -15 $$", 128 + 15),
])
def test_exit_codes_follow_shell_conventions(cmd: str | list[str], code: int) -> None:
    assert procs.run_command(cmd, timeout=10)["exit_code"] == code


def test_missing_program_explains_itself() -> None:
    r = procs.run_command(["no-such-program-skyhub"], timeout=10)
    assert b"no-such-program-skyhub" in r["stderr"]


def test_stdin_env_and_cwd_reach_the_command(tmp_path: Path) -> None:
    (tmp_path / "here.txt").write_text("x")
    r = procs.run_command("cat; echo \"$GREETING\"; ls", timeout=10, cwd=str(tmp_path),
                          env={"GREETING": "hello", "PATH": os.environ["PATH"]}, stdin=b"fed\n")
    assert r["stdout"] == b"fed\nhello\nhere.txt\n"
    assert r["exit_code"] == 0 and not r["timed_out"]


def test_argv_commands_are_not_shell_interpreted() -> None:
    r = procs.run_command(["echo", "$HOME", "a;b"], timeout=10)
    assert r["stdout"] == b"$HOME a;b\n"


def test_stderr_is_kept_apart_from_stdout() -> None:
    r = procs.run_command("echo out; echo err >&2", timeout=10)
    assert (r["stdout"], r["stderr"]) == (b"out\n", b"err\n")


def test_timeout_kills_the_whole_tree_including_a_setsid_child() -> None:
    secs = unique_seconds()
    start = time.monotonic()
    r = procs.run_command(f"setsid sleep {secs} & sleep {secs}; echo never", timeout=1)
    elapsed = time.monotonic() - start
    assert r["timed_out"] and r["exit_code"] == 128 + 9
    assert b"never" not in r["stdout"]
    assert elapsed < 10
    time.sleep(0.2)
    assert processes_with(f"sleep {secs}") == []


def test_output_beyond_the_cap_keeps_head_and_tail_and_counts_the_rest() -> None:
    total, cap = 3_000_000, 1000
    r = procs.run_command(
        f"{sys.executable} -c \"import sys; sys.stdout.write('H' * 600 + 'm' * "
        f"({total} - 1200) + 'T' * 600)\"", timeout=30, max_output=cap)
    out = r["stdout"]
    marker = procs.TRUNCATION_MARKER.format(n=total - cap).encode()
    assert out == b"H" * 500 + marker + b"T" * 500


def test_output_under_the_cap_is_untouched() -> None:
    r = procs.run_command("printf abc", timeout=10, max_output=1000)
    assert r["stdout"] == b"abc"


def test_binary_output_survives_byte_for_byte() -> None:
    r = procs.run_command([sys.executable, "-c",
                           "import sys; sys.stdout.buffer.write(bytes(range(256)) * 4)"],
                          timeout=10)
    assert r["stdout"] == bytes(range(256)) * 4


def test_preexec_fn_and_wrap_are_applied() -> None:
    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (100, 100))

    r = procs.run_command("echo $WRAPPED; ulimit -n", timeout=10, preexec_fn=limit_files,
                          wrap=["env", "WRAPPED=yes"])
    assert r["stdout"] == b"yes\n100\n"


# ----------------------------------------------------------------------- tar and snapshots
def make_tree(root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("print('hi')\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    (root / "blob.bin").write_bytes(bytes(range(256)))
    (root / "empty").mkdir()
    (root / "link").symlink_to("src/pkg/mod.py")
    (root / ".hidden").write_text("dot")


def tree(root: Path) -> dict[str, tuple]:
    """Everything that restore should reproduce: type, content or target, and mode."""
    out: dict[str, tuple] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = ("dir", p.stat().st_mode & 0o777)
        else:
            out[rel] = ("file", p.read_bytes(), p.stat().st_mode & 0o777)
    return out


def test_restore_dir_gives_back_exactly_the_snapshot(tmp_path: Path) -> None:
    work, snap = tmp_path / "work", tmp_path / "snaps" / "s1.tar"
    work.mkdir()
    make_tree(work)
    before = tree(work)
    tars.snapshot_dir(str(work), str(snap))
    (work / "run.sh").write_text("changed")
    (work / "src" / "pkg" / "mod.py").unlink()
    (work / "new-dir").mkdir()
    (work / "new-dir" / "new.txt").write_text("new")
    (work / "empty").rmdir()
    tars.restore_dir(str(work), str(snap))
    assert tree(work) == before
    assert os.access(work / "run.sh", os.X_OK)


def test_clear_dir_keeps_the_directory_itself(tmp_path: Path) -> None:
    make_tree(tmp_path)
    tmp_path.chmod(0o750)
    trees.clear_dir(str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    assert tmp_path.stat().st_mode & 0o777 == 0o750


def test_clear_dir_removes_directories_made_unreadable(tmp_path: Path) -> None:
    """A command may chmod 000 a directory; a reset must still remove it (this bites when
    not running as root, which ignores permissions)."""
    (tmp_path / "locked" / "inner").mkdir(parents=True)
    (tmp_path / "locked" / "inner" / "f").write_text("x")
    (tmp_path / "locked" / "inner").chmod(0o500)
    (tmp_path / "locked").chmod(0o000)
    trees.clear_dir(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_tar_round_trip_copies_a_tree(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    make_tree(src)
    tars.untar_bytes(tars.tar_bytes(str(src)), str(dest))
    assert tree(dest) == tree(src)


def evil_tar(name: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    return buf.getvalue()


@pytest.mark.parametrize("name", ["../escaped.txt", "a/../../escaped.txt"])
def test_untar_refuses_paths_that_leave_the_destination(tmp_path: Path, name: str) -> None:
    dest = tmp_path / "dest"
    with pytest.raises((ValueError, tarfile.TarError)):
        tars.untar_bytes(evil_tar(name), str(dest))
    assert not (tmp_path / "escaped.txt").exists()


def test_untar_refuses_writing_through_a_symlink_out_of_the_destination(tmp_path: Path) -> None:
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    (dest / "out").symlink_to(outside)
    with pytest.raises((ValueError, tarfile.TarError)):
        tars.untar_bytes(evil_tar("out/escaped.txt"), str(dest))
    assert list(outside.iterdir()) == []


# ----------------------------------------------------------------------- the JSON server
@pytest.fixture(scope="module")
def guest_pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The guest's zipapp as sandboxes get it (in a dir named guest-app<N>: see .ci/run)."""
    path = tmp_path_factory.mktemp("guest-app") / guest_app.APP_NAME
    path.write_bytes(guest_app.zipapp())
    return path


@pytest.fixture
def server(guest_pyz: Path) -> Iterator[subprocess.Popen]:
    """`python3 -I -u guest.pyz` speaking the wire protocol over its stdin/stdout."""
    proc = subprocess.Popen([sys.executable, "-I", "-u", str(guest_pyz)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    yield proc
    proc.stdin.close()
    try:
        proc.wait(timeout=10)
    finally:
        proc.kill()


def call(proc: subprocess.Popen, **req: object) -> dict:
    wire.write_message(proc.stdin, req)
    reply = wire.read_message(proc.stdout)
    assert reply is not None, "the guest closed its output"
    return reply


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_server_answers_ping_with_its_identity(server: subprocess.Popen) -> None:
    r = call(server, op="ping")
    assert r["ok"] and r["pid"] == server.pid and r["uid"] == os.getuid()


def test_server_runs_commands_with_stdin_env_and_exit_code(server: subprocess.Popen) -> None:
    r = call(server, op="exec", cmd="cat; echo $WHO; exit 4", timeout=10,
             stdin=b64(b"in\n"), env={"WHO": "agent"})
    assert r["ok"] and r["exit_code"] == 4 and not r["timed_out"]
    assert base64.b64decode(r["stdout"]) == b"in\nagent\n"


def test_server_times_commands_out(server: subprocess.Popen) -> None:
    r = call(server, op="exec", cmd="sleep 30", timeout=0.5)
    assert r["ok"] and r["timed_out"] and r["exit_code"] == 137


def test_server_writes_reads_and_reports_missing_files(server: subprocess.Popen,
                                                       tmp_path: Path) -> None:
    path = str(tmp_path / "deep" / "f.bin")
    assert call(server, op="write", path=path, data=b64(b"\x00\xff"), mode=0o600)["ok"]
    assert (tmp_path / "deep" / "f.bin").stat().st_mode & 0o777 == 0o600
    r = call(server, op="read", path=path)
    assert base64.b64decode(r["data"]) == b"\x00\xff"
    r = call(server, op="read", path=str(tmp_path / "missing"))
    assert not r["ok"] and r["type"] == "FileNotFoundError"


def test_server_tars_and_untars_trees(server: subprocess.Popen, tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    make_tree(src)
    data = call(server, op="tar", path=str(src))["data"]
    assert call(server, op="untar", path=str(dest), data=data)["ok"]
    assert tree(dest) == tree(src)


def test_server_snapshots_and_restores(server: subprocess.Popen, tmp_path: Path) -> None:
    make_tree(tmp_path)
    before = tree(tmp_path)
    name = f"test-{uuid.uuid4().hex}"
    r = call(server, op="snapshot", path=str(tmp_path), name=name)
    try:
        assert r["ok"]
        (tmp_path / "blob.bin").unlink()
        (tmp_path / "extra").write_text("x")
        r = call(server, op="restore", path=str(tmp_path), name=name, kill_processes=False)
        assert r["ok"] and r["killed"] == 0
        assert tree(tmp_path) == before
    finally:
        Path(wire.SNAPSHOT_DIR, name + ".tar").unlink(missing_ok=True)


def test_server_rejects_unknown_ops_and_keeps_serving(server: subprocess.Popen) -> None:
    r = call(server, op="format-disk")
    assert not r["ok"] and "format-disk" in r["error"]
    assert call(server, op="ping")["ok"]


def test_server_stops_at_end_of_input(server: subprocess.Popen) -> None:
    server.stdin.close()
    assert server.wait(timeout=10) == 0
