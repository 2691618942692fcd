"""The local backend under real bubblewrap: isolation, limits, files, snapshots, cleanup.

Every sandbox is made through `make`, which records it, so the module can check at the end
that none left a scratch dir or a process behind.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import skyhub.sandbox
from skyhub.errors import SandboxUnavailable, SkyhubError
from skyhub.sandbox import local
from skyhub.sandbox.local import LocalSandbox

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from proc_helpers import processes_with, unique_seconds

MADE: list[LocalSandbox] = []


def eventually_empty(find: Callable[[], list[int]], within_s: float = 3.0) -> list[int]:
    """`find()` once it is empty, or its last answer after `within_s` (killed processes take
    a moment to leave /proc after a namespace dies)."""
    deadline = time.monotonic() + within_s
    while (left := find()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def sandbox_processes(sb: LocalSandbox) -> list[int]:
    """Host pids that belong to `sb`: its marker in their environment, or its uid."""
    marker = f"{local.MARKER_ENV}={sb.id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                tagged = marker in f.read().split(b"\0")
            with open(f"/proc/{entry}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            uid = int(status["Uid"].split()[0])
        except (OSError, KeyError, ValueError):
            continue
        if status["State"].split()[0] == "Z":
            continue  # dead, waiting for a slow init to reap it
        if tagged or (sb.uid is not None and uid == sb.uid):
            found.append(int(entry))
    return found


@pytest.fixture(scope="module", autouse=True)
def nothing_left_behind() -> Iterator[None]:
    yield
    for sb in MADE:
        sb.close()
    left_dirs = [str(sb._root) for sb in MADE if sb._root.exists()]
    left_procs = {sb.id: p for sb in MADE if (p := eventually_empty(
        lambda sb=sb: sandbox_processes(sb)))}
    ours = [s["id"] for s in local.list_sandboxes() if s["owner_pid"] == os.getpid()]
    MADE.clear()
    assert not left_dirs and not left_procs and not ours


@pytest.fixture
def make(bwrap: str) -> Callable[..., LocalSandbox]:
    def new(**kwargs: object) -> LocalSandbox:
        kwargs.setdefault("isolation", "bwrap")
        kwargs.setdefault("memory_mb", 512)
        sb = LocalSandbox(**kwargs)
        MADE.append(sb)
        return sb

    return new


@pytest.fixture
def sb(make: Callable[..., LocalSandbox]) -> Iterator[LocalSandbox]:
    box = make()
    yield box
    box.close()


# ----------------------------------------------------------------------- commands
def test_commands_run_in_the_workdir_with_their_exit_codes(sb: LocalSandbox) -> None:
    assert sb.isolation == "bwrap"
    r = sb.exec("pwd; echo err >&2")
    assert (r.stdout, r.stderr, r.exit_code, r.timed_out) == ("/work\n", "err\n", 0, False)
    assert sb.exec("exit 3").exit_code == 3
    assert sb.exec("kill -9 $$").exit_code == 137
    assert sb.exec("no-such-program-skyhub").exit_code == 127
    assert sb.exec(["no-such-program-skyhub"]).exit_code == 127


def test_stdin_env_cwd_and_argv_reach_the_command(sb: LocalSandbox) -> None:
    sb.exec("mkdir -p sub/dir")
    r = sb.exec("cat; echo $WHO; pwd", stdin="fed\n", env={"WHO": "agent"}, cwd="sub/dir")
    assert r.stdout == "fed\nagent\n/work/sub/dir\n"
    assert sb.exec(["echo", "$HOME", "a;b"]).stdout == "$HOME a;b\n"


def test_host_environment_does_not_leak_in(sb: LocalSandbox, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setenv("SKYHUB_TEST_SECRET", "hunter2")
    assert "hunter2" not in sb.exec("env").stdout


def test_files_written_by_a_command_are_visible_to_the_api_and_back(sb: LocalSandbox) -> None:
    sb.exec("echo from-command > made.txt")
    assert sb.read_file("made.txt") == b"from-command\n"
    sb.write_file("tools/run.sh", "#!/bin/sh\necho from-api\n", mode=0o755)
    assert sb.exec("./tools/run.sh").stdout == "from-api\n"
    assert sb.exec("echo more >> tools/run.sh").exit_code == 0  # still writable inside


def test_write_file_replaces_files_keeping_mode_and_never_writes_through_links(
        sb: LocalSandbox) -> None:
    sb.exec("printf '#!/bin/sh\\necho 1\\n' > s.sh && chmod 755 s.sh && ln s.sh hard")
    sb.write_file("s.sh", "#!/bin/sh\necho 2\n")
    assert sb.exec("./s.sh").stdout == "2\n"
    assert sb.exec("./hard").stdout == "1\n"  # the other name still has the old file
    assert sb.exec("ls -A").stdout == "hard\ns.sh\n"  # no temporary file left


def _host_port_listener() -> tuple[socket.socket, list[str]]:
    srv = socket.socket()
    srv.bind(("0.0.0.0", 0))
    srv.listen(8)
    addrs = ["127.0.0.1"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.123", 9))  # no packet is sent; just picks the host's address
            addrs.append(probe.getsockname()[0])
        except OSError:
            pass
    return srv, addrs


CONNECT = ("import socket, sys\nfor a in sys.argv[2:]:\n    s = socket.socket()\n"
           "    s.settimeout(3)\n    print(a, s.connect_ex((a, int(sys.argv[1]))))\n")


def test_network_is_off_so_host_ports_are_unreachable(sb: LocalSandbox) -> None:
    srv, addrs = _host_port_listener()
    with srv:
        port = srv.getsockname()[1]
        for a in addrs:  # the port really is open on the host
            socket.create_connection((a, port), timeout=3).close()
        r = sb.exec(["python3", "-c", CONNECT, str(port), *addrs], timeout=30)
    results = dict(line.split() for line in r.stdout.splitlines())
    assert set(results) == set(addrs), r
    assert all(code != "0" for code in results.values()), results


def test_network_true_reaches_the_host(make: Callable[..., LocalSandbox]) -> None:
    srv, _ = _host_port_listener()
    with srv:
        port = srv.getsockname()[1]
        r = make(network=True).exec(["python3", "-c", CONNECT, str(port), "127.0.0.1"])
    assert r.stdout == "127.0.0.1 0\n", r


# ----------------------------------------------------------------------- limits
HOG = """x = []
try:
    while len(x) < 1000:
        x.append(bytearray(16 << 20))
except MemoryError:
    print(len(x) * 16)
"""


def test_memory_hog_fails_at_the_limit(make: Callable[..., LocalSandbox]) -> None:
    sb = make(memory_mb=256)
    assert sb.exec("python3 -c 'b = bytearray(64 << 20); print(len(b))'").ok
    r = sb.exec(["python3", "-c", HOG], timeout=60)
    assert not r.timed_out and r.stdout, f"the hog was not stopped: {r}"
    assert 64 <= int(r.stdout) < 256, f"the hog got {r.stdout.strip()} MiB"


# Forks sleeping children (which let go of the output pipes) until fork fails: prints how
# many it made and the errno. Stops at 2000 so a broken limit cannot take the machine down.
FORKS = """import os, time
n = 0
try:
    while n < 2000:
        if os.fork() == 0:
            os.close(1)
            os.close(2)
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print(n, e.errno)
"""


def test_process_limit_stops_forking(make: Callable[..., LocalSandbox]) -> None:
    sb = make(pids=40)
    r = sb.exec(["python3", "-c", FORKS], timeout=60)
    assert len(r.stdout.split()) == 2, f"fork never failed: {r}"
    forked, err = r.stdout.split()
    assert int(forked) < 40 and err == "11", r  # EAGAIN well before 2000 forks
    # the sleeping children die with the namespace
    assert eventually_empty(lambda: sandbox_processes(sb)) == []


def test_fork_bomb_is_contained(make: Callable[..., LocalSandbox]) -> None:
    sb = make(pids=64)
    peak: list[int] = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], len(sandbox_processes(sb)))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        r = sb.exec("bomb() { bomb | bomb & }; bomb; sleep 3", timeout=8)
    finally:
        done.set()
        watcher.join()
    assert r.duration_s < 30
    assert peak[0] <= 64 + 8, f"the bomb reached {peak[0]} processes"
    assert eventually_empty(lambda: sandbox_processes(sb)) == []
    assert sb.exec("echo alive").stdout == "alive\n"


def test_timeout_returns_promptly_and_leaves_no_process(sb: LocalSandbox) -> None:
    secs = unique_seconds()
    r = sb.exec(f"sleep {secs} & sleep {secs}", timeout=2)
    assert r.timed_out and r.exit_code == 137
    assert 1.5 < r.duration_s < 10
    assert eventually_empty(lambda: processes_with(f"sleep {secs}")) == []


def test_background_processes_end_with_their_exec(sb: LocalSandbox) -> None:
    secs = unique_seconds()
    assert sb.exec(f"sleep {secs} >/dev/null 2>&1 &").exit_code == 0
    assert eventually_empty(lambda: processes_with(f"sleep {secs}")) == []


def test_huge_output_is_capped_with_a_marker(make: Callable[..., LocalSandbox]) -> None:
    sb = make(max_output=65536)
    r = sb.exec("head -c 50000000 /dev/zero | tr '\\0' y", timeout=60)
    assert r.exit_code == 0
    assert f"{50_000_000 - 65536} bytes of output truncated" in r.stdout
    assert r.stdout.startswith("y" * 32768) and r.stdout.endswith("y" * 32768)
    assert len(r.stdout) < 65536 + 200


# ----------------------------------------------------------------------- file isolation
def test_writes_outside_the_workdir_never_reach_the_host(sb: LocalSandbox) -> None:
    name = f"skyhub-escape-{uuid.uuid4().hex}"
    r = sb.exec(f"for d in /tmp / /etc /usr /root; do echo x > $d/{name}; done; "
                f"ls /tmp/{name}")
    assert f"/tmp/{name}" in r.stdout  # /tmp inside is writable, but private
    for d in ("/tmp", "/", "/etc", "/usr", "/root", tempfile.gettempdir()):
        assert not os.path.exists(os.path.join(d, name))
    assert sb.exec(f"ls /tmp/{name}").exit_code != 0  # and fresh for every command
    assert sb.exec("ls /root /home/* 2>/dev/null | head -1").stdout == ""


def test_absolute_paths_outside_the_workdir_are_rejected(sb: LocalSandbox) -> None:
    for bad in ("/etc/passwd", "../outside.txt", "/work/../etc/passwd"):
        with pytest.raises(ValueError, match="only expose"):
            sb.read_file(bad)
        with pytest.raises(ValueError, match="only expose"):
            sb.write_file(bad, "x")


@pytest.mark.parametrize("target", ["/etc", "/", "../../..", "/tmp"])
def test_symlinks_cannot_carry_file_operations_out(sb: LocalSandbox, target: str) -> None:
    sb.exec(f"ln -s {target} escape")
    with pytest.raises(ValueError, match="only expose"):
        sb.read_file("escape/passwd")
    with pytest.raises(ValueError, match="only expose"):
        sb.write_file("escape/skyhub-escape.txt", "x")
    with pytest.raises(ValueError, match="only expose"):
        sb.upload(__file__, "escape")
    assert not os.path.exists("/etc/skyhub-escape.txt")


def test_symlinks_inside_the_workdir_work_like_inside_the_sandbox(sb: LocalSandbox) -> None:
    sb.exec("mkdir d && echo data > d/real.txt && ln -s /work/d/real.txt abs && "
            "ln -s d/real.txt rel && ln -s /work/d dirlink")
    assert sb.read_file("abs") == sb.read_file("rel") == b"data\n"
    sb.write_file("dirlink/via-link.txt", "ok")
    assert sb.exec("cat d/via-link.txt").stdout == "ok"


def test_a_fifo_is_refused_instead_of_hanging(sb: LocalSandbox) -> None:
    sb.exec("mkfifo pipe")
    with pytest.raises(OSError, match="regular"):
        sb.read_file("pipe")


def test_upload_and_download_copy_trees(sb: LocalSandbox, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("A = 1\n")
    (src / "top.txt").write_text("top")
    sb.upload(src, "project")
    sb.upload(src / "top.txt")
    assert sb.exec("cat project/pkg/a.py top.txt && echo more > project/new.txt").ok
    sb.download("project", tmp_path / "back")
    assert (tmp_path / "back" / "pkg" / "a.py").read_text() == "A = 1\n"
    assert (tmp_path / "back" / "new.txt").read_text() == "more\n"
    sb.download("top.txt", tmp_path / "one")
    assert (tmp_path / "one" / "top.txt").read_text() == "top"
    with pytest.raises(FileNotFoundError):
        sb.read_file("missing.txt")


# ----------------------------------------------------------------------- snapshots
def test_restore_gives_back_the_snapshot_and_kills_processes(sb: LocalSandbox) -> None:
    sb.write_file("keep.txt", "v1")
    sb.exec("mkdir -p src && echo code > src/main.py && chmod +x src/main.py")
    snap = sb.snapshot()
    sb.exec("rm -rf src && echo v2 > keep.txt && echo junk > junk.txt")
    sb.write_file("more/junk.txt", "x")
    sb.restore(snap)
    assert sb.exec("find . | sort").stdout == ".\n./keep.txt\n./src\n./src/main.py\n"
    assert sb.read_file("keep.txt") == b"v1"
    assert sb.exec("test -x src/main.py").ok
    sb.write_file("after.txt", "writable after restore")


def test_a_snapshot_restores_only_on_its_own_sandbox(make: Callable[..., LocalSandbox]) -> None:
    a, b = make(), make()
    with pytest.raises(SkyhubError, match="not taken by"):
        b.restore(a.snapshot())


# ----------------------------------------------------------------------- options
def test_image_is_rejected_with_an_explanation() -> None:
    with pytest.raises(ValueError, match="host"):
        LocalSandbox(image="python:3.12")


def test_isolation_bwrap_without_bwrap_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "find_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        LocalSandbox(isolation="bwrap")


def test_without_bwrap_auto_falls_back_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "find_bwrap", lambda: None)
    monkeypatch.setattr(local, "_warned_weak", False)
    with pytest.warns(RuntimeWarning, match="without isolation"):
        first = LocalSandbox()
    MADE.append(first)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = LocalSandbox(isolation="none")
    MADE.append(second)
    for sb in (first, second):
        assert sb.isolation == "none"
        sb.write_file("a.txt", "hi")
        r = sb.exec("pwd; cat a.txt")
        assert r.stdout == f"{sb.workdir}\nhi"
        assert sb.exec("sleep 30", timeout=1).timed_out
        sb.close()


def test_isolation_none_still_limits_processes_and_memory(make: Callable[..., LocalSandbox],
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setattr(local, "_warned_weak", True)
    sb = make(isolation="none", pids=40, memory_mb=256)
    r = sb.exec(["python3", "-c", FORKS], timeout=30)
    assert not r.timed_out
    if os.geteuid() == 0:  # as root it runs as its own uid, so the count is exact
        assert int(r.stdout.split()[0]) < 40, r
    assert sb.exec("python3 -c 'bytearray(512 << 20)'").exit_code != 0
    sb.close()
    assert eventually_empty(lambda: sandbox_processes(sb)) == []


def test_create_makes_a_local_sandbox(bwrap: str) -> None:
    with skyhub.sandbox.create(backend="local", memory_mb=256) as sb:
        MADE.append(sb)
        assert sb.backend == "local" and sb.exec("echo ok").stdout == "ok\n"


def test_close_is_idempotent_and_removes_the_scratch_dir(sb: LocalSandbox) -> None:
    sb.exec("mkdir -p ro/deep && chmod 500 ro")
    root = sb._root
    assert root.is_dir() and sb.id in [s["id"] for s in local.list_sandboxes()]
    sb.close()
    sb.close()
    assert sb.closed and not root.exists()
    with pytest.raises(SkyhubError, match="closed"):
        sb.exec("true")


def test_labels_live_beside_the_workdir_not_in_it(sb: LocalSandbox) -> None:
    assert sb.exec("ls -A").stdout == ""
    labels = json.loads((sb._root / local.LABEL_FILE).read_text())
    assert labels["skyhub.owner_pid"] == str(os.getpid()) and labels["skyhub.id"] == sb.id


# ----------------------------------------------------------------------- reaping
@pytest.fixture
def own_base(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="skyhub-reap-test-"))
    monkeypatch.setenv(local.ENV_DIR, str(base))
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False)


def test_reap_removes_dead_owners_sandboxes_and_keeps_live_ones(
        reaping: None, make: Callable[..., LocalSandbox], own_base: Path) -> None:
    live, orphan = make(), make()
    dead = subprocess.Popen(["true"])
    dead.wait()
    label = orphan._root / local.LABEL_FILE
    labels = json.loads(label.read_text())
    labels.update({"skyhub.owner_pid": str(dead.pid), "skyhub.owner_start": "-1"})
    label.write_text(json.dumps(labels))
    assert local.reap(older_than_s=3600) == []  # too young
    assert local.reap(dry_run=True) == [orphan.id] and orphan._root.exists()
    assert local.reap() == [orphan.id]
    assert not orphan._root.exists() and live._root.exists()
    assert live.exec("echo still").stdout == "still\n"
    assert skyhub.sandbox.reap(backends=("local",)) == []
