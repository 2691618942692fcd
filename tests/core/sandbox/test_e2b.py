"""The e2b backend: a clear error without a key, the adapter's logic against a local stand-in
for E2B's SDK sandbox, and live tests against E2B's cloud when E2B_API_KEY is set."""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("e2b")

import e2b

import skyhub.sandbox
from skyhub.errors import InfraError, SandboxUnavailable, SkyhubError
from skyhub.sandbox import e2b as backend
from skyhub.sandbox.e2b import E2BSandbox

FAKE_KEY = "e2b_" + "0" * 40


# ------------------------------------------------------------------------ no key, no cloud
def test_without_a_key_create_says_what_to_set_and_calls_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)

    def forbidden(*a: object, **k: object) -> None:
        pytest.fail("Sandbox.create was called without a key")

    monkeypatch.setattr(e2b.Sandbox, "create", forbidden)
    start = time.monotonic()
    with pytest.raises(SandboxUnavailable, match="E2B_API_KEY") as info:
        skyhub.sandbox.create(backend="e2b")
    assert time.monotonic() - start < 1.0
    assert "backend='docker'" in str(info.value)


def test_unreachable_cloud_becomes_sandbox_unavailable_with_the_cause(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The real SDK: here E2B's cloud does not resolve; where it does, the fake key is refused.
    monkeypatch.setenv("E2B_API_KEY", FAKE_KEY)
    with pytest.raises(SandboxUnavailable, match="could not create an E2B sandbox") as info:
        skyhub.sandbox.create(backend="e2b", timeout_s=60)
    assert info.value.__cause__ is not None


def test_a_vm_that_does_not_answer_is_sandbox_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The real SDK in its debug mode makes no API call and talks to envd on localhost:49983,
    # where nothing listens: its own "sandbox unreachable" error must not pass as a timeout.
    monkeypatch.setenv("E2B_API_KEY", FAKE_KEY)
    monkeypatch.setenv("E2B_DEBUG", "true")
    with pytest.raises(SandboxUnavailable, match="does not answer") as info:
        skyhub.sandbox.create(backend="e2b")
    assert isinstance(info.value.__cause__.__cause__, e2b.SandboxUnreachableException)


# ------------------------------------------------------------- a stand-in for the SDK object
class FakeE2BSandbox:
    """Stands in for an `e2b.Sandbox` because E2B's cloud cannot be reached from CI (the live
    tests at the end use the real one when E2B_API_KEY is set). Its commands run in a local
    bash and its files live on the local disk, so the adapter's shell scripts (timeout,
    stdin redirection, tar) really run; it raises the SDK's own exception classes."""

    sandbox_id = "fake-e2b"

    def __init__(self) -> None:
        self.commands = _FakeCommands(self)
        self.files = _FakeFiles()
        self.calls: list[tuple[str, str | None]] = []
        self.kills = self.pauses = self.connects = 0
        self.fail_next: Exception | None = None

    def kill(self) -> bool:
        self.kills += 1
        return True

    def pause(self) -> bool:
        self.pauses += 1
        return True

    def connect(self, timeout: int | None = None) -> FakeE2BSandbox:
        self.connects += 1
        return self


class _FakeCommands:
    def __init__(self, owner: FakeE2BSandbox) -> None:
        self.owner = owner

    def run(self, cmd: str, background: bool = False, envs: dict[str, str] | None = None,
            user: str | None = None, timeout: float = 60,
            retain_output: bool = True) -> Any:
        self.owner.calls.append((cmd, user))
        if self.owner.fail_next is not None:
            err, self.owner.fail_next = self.owner.fail_next, None
            raise err
        if "kill -9 -1" in cmd:  # never here: these tests run as root on the host
            cmd = "true"
        handle = _FakeHandle(cmd, envs, timeout)
        return handle if background else handle.wait()


class _FakeHandle:
    def __init__(self, cmd: str, envs: dict[str, str] | None, timeout: float) -> None:
        self.timeout = timeout or None
        self.proc = subprocess.Popen(["bash", "-c", cmd], env={**os.environ, **(envs or {})},
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)

    def wait(self, on_stdout: Any = None, on_stderr: Any = None) -> e2b.CommandResult:
        try:
            out_b, err_b = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.communicate()
            raise e2b.TimeoutException("fake: the command stream passed its timeout") from None
        out, err = out_b.decode(errors="replace"), err_b.decode(errors="replace")
        if out and on_stdout:
            on_stdout(out)
        if err and on_stderr:
            on_stderr(err)
        if self.proc.returncode:
            raise e2b.CommandExitException(stderr=err, stdout=out, error=None,
                                           exit_code=self.proc.returncode)
        return e2b.CommandResult(stderr=err, stdout=out, exit_code=0, error=None)

    def kill(self) -> bool:
        os.killpg(self.proc.pid, 9)
        return True


class _FakeFiles:
    def write(self, path: str, data: str | bytes, user: str | None = None) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data.encode() if isinstance(data, str) else data)

    def read(self, path: str, format: str = "text", user: str | None = None) -> Any:
        if not Path(path).is_file():
            raise e2b.FileNotFoundException(f"fake: {path} not found")
        data = Path(path).read_bytes()
        return bytearray(data) if format == "bytes" else data.decode()


@pytest.fixture
def tmp_in_vm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(backend, "TMP_DIR", str(tmp_path / "vm-tmp"))
    return tmp_path / "vm-tmp"


@pytest.fixture
def fake(tmp_in_vm: Path) -> FakeE2BSandbox:
    return FakeE2BSandbox()


@pytest.fixture
def sb(fake: FakeE2BSandbox, tmp_path: Path) -> Iterator[E2BSandbox]:
    s = E2BSandbox(workdir=str(tmp_path / "work"), _sdk_sandbox=fake, pids=1 << 20)
    yield s
    s.close()


def test_exit_codes_and_output_are_returned_not_raised(sb: E2BSandbox) -> None:
    r = sb.exec("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (3, "out\n", "err\n", False)
    assert sb.exec(["printf", "%s|", "a b", "it's"]).stdout == "a b|it's|"
    assert sb.exec("echo $GREETING", env={"GREETING": "hi"}).stdout == "hi\n"


def test_timeout_kills_the_command_and_reports_137(sb: E2BSandbox) -> None:
    r = sb.exec("sleep 0.2; echo early; sleep 30; echo late", timeout=1)
    assert r.timed_out and r.exit_code == 137
    assert "early" in r.stdout and "late" not in r.stdout
    assert r.duration_s < 5


def test_sdk_deadline_is_a_backstop_when_the_vm_timeout_fails(
        sb: E2BSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "GRACE_S", -1.5)  # the SDK's deadline now comes first
    r = sb.exec("sleep 30", timeout=2)
    assert r.timed_out and r.exit_code == 137 and r.duration_s < 5


def test_a_vm_that_died_is_an_infra_error_not_a_timeout(
        sb: E2BSandbox, fake: FakeE2BSandbox) -> None:
    fake.fail_next = e2b.SandboxNotRunningException("the sandbox was killed")
    with pytest.raises(InfraError, match="create a new sandbox"):
        sb.exec("true")


def test_output_is_capped_with_the_marker(fake: FakeE2BSandbox, tmp_path: Path) -> None:
    with E2BSandbox(workdir=str(tmp_path / "w"), _sdk_sandbox=fake, max_output=1000) as s:
        r = s.exec("head -c 100000 /dev/zero | tr '\\0' a; echo END")
    assert "bytes of output truncated" in r.stdout
    assert r.stdout.startswith("a" * 500) and r.stdout.endswith("END\n")
    assert len(r.stdout) < 1100


def test_stdin_is_fed_from_a_file_that_is_then_removed(sb: E2BSandbox, tmp_in_vm: Path) -> None:
    assert sb.exec("cat; echo", stdin=b"hello").stdout == "hello\n"
    assert sb.exec("wc -l", stdin="a\nb\n").stdout.strip() == "2"
    assert not list(tmp_in_vm.glob("stdin-*"))
    assert sb.exec("cat", timeout=5).stdout == ""  # no stdin: /dev/null, never a hang


def test_paths_are_relative_to_the_workdir(sb: E2BSandbox, tmp_path: Path) -> None:
    sb.write_file("a/b.txt", "x")
    assert (tmp_path / "work" / "a" / "b.txt").read_text() == "x"
    assert sb.read_file("a/b.txt") == b"x"
    assert sb.exec("pwd").stdout.strip() == str(tmp_path / "work")
    assert sb.exec("cat b.txt", cwd="a").stdout == "x"
    bad = sb.exec("true", cwd="nope")
    assert bad.exit_code != 0 and "nope" in bad.stderr
    sb.write_file("run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert sb.exec("./run.sh").stdout == "ran\n"
    with pytest.raises(FileNotFoundError):
        sb.read_file("missing.txt")


def test_upload_and_download_trees_through_tar(sb: E2BSandbox, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "m.py").write_text("print(1)\n")
    (src / "top.txt").write_text("top")
    sb.upload(src, "proj")
    assert sb.read_file("proj/pkg/m.py") == b"print(1)\n"
    sb.upload(src / "top.txt")
    assert sb.read_file("top.txt") == b"top"
    out = tmp_path / "out"
    sb.download("proj", out)
    assert (out / "pkg" / "m.py").read_text() == "print(1)\n" and (out / "top.txt").exists()
    sb.download("top.txt", tmp_path / "one")
    assert (tmp_path / "one" / "top.txt").read_text() == "top"
    with pytest.raises(FileNotFoundError):
        sb.download("absent", out)
    sb.exec("mkdir evil && ln -s /etc/passwd evil/link && echo ok > evil/kept")
    sb.download("evil", tmp_path / "evil")  # untrusted content cannot point out of `dest`
    assert not os.path.lexists(tmp_path / "evil" / "link")
    assert (tmp_path / "evil" / "kept").read_text() == "ok\n"


@pytest.mark.hostile
def test_download_extracts_a_hostile_archive_without_tarfile(
        sb: E2BSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the VM hands back is the agent's to forge: the realpath chain that fools
    tarfile's data filter on Python 3.11.7 lands nowhere outside."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
    from hostile_archives import SECRET, assert_contained, realpath_chain

    outside, dest = tmp_path / "outside", tmp_path / "dest"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    chain = realpath_chain("../outside", real_names=False, root="./")
    real_read = sb.read_file
    monkeypatch.setattr(sb, "read_file", lambda p: chain if "xfer-" in p else real_read(p))
    monkeypatch.setattr(tarfile.TarFile, "extractall", None)  # never reached
    sb.exec("mkdir -p proj")
    sb.download("proj", dest)
    assert_contained(dest, outside)
    assert not (outside / "pwned.txt").exists()


def test_restore_returns_to_the_snapshot_again_and_again(
        sb: E2BSandbox, fake: FakeE2BSandbox) -> None:
    sb.write_file("a.txt", "clean")
    snap = sb.snapshot()
    for _ in range(2):  # what E2B's pause/resume cannot do: go back after further changes
        sb.write_file("a.txt", "dirty")
        sb.exec("mkdir -p build && touch build/x .hidden")
        sb.restore(snap)
        assert sb.exec("ls -A").stdout == "a.txt\n" and sb.read_file("a.txt") == b"clean"
    assert [u for c, u in fake.calls if c == backend.KILL_ALL] == ["user", "user"]
    sb.restore(snap, kill_processes=False)
    assert sum(c == backend.KILL_ALL for c, _ in fake.calls) == 2
    other = E2BSandbox(workdir=sb.workdir, _sdk_sandbox=FakeE2BSandbox())
    with pytest.raises(ValueError, match="belongs to"):
        other.restore(snap)
    other.close()


def test_restore_never_kills_everything_as_root(fake: FakeE2BSandbox, tmp_path: Path) -> None:
    with E2BSandbox(workdir=str(tmp_path / "w"), _sdk_sandbox=fake, user="root") as s:
        s.restore(s.snapshot())
    assert not [c for c, _ in fake.calls if "kill -9" in c]


def test_pause_then_any_call_resumes(sb: E2BSandbox, fake: FakeE2BSandbox) -> None:
    sb.write_file("kept.txt", "1")
    sb.pause()
    assert fake.pauses == 1 and fake.connects == 0
    assert sb.read_file("kept.txt") == b"1" and fake.connects == 1
    sb.exec("true")
    assert fake.connects == 1


def test_close_is_idempotent_and_kills_the_vm_once(sb: E2BSandbox,
                                                   fake: FakeE2BSandbox) -> None:
    sb.close()
    sb.close()
    assert fake.kills == 1 and sb.closed
    with pytest.raises(SkyhubError, match="closed"):
        sb.exec("true")


def test_create_passes_template_labels_network_and_lifetime_to_the_sdk(
        monkeypatch: pytest.MonkeyPatch, tmp_in_vm: Path, tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def create(template: str | None = None, timeout: int | None = None,
               metadata: dict[str, str] | None = None,
               allow_internet_access: bool | None = None, **opts: Any) -> FakeE2BSandbox:
        seen.append({"template": template, "timeout": timeout, "metadata": metadata,
                     "allow_internet_access": allow_internet_access, **opts})
        return FakeE2BSandbox()

    monkeypatch.setattr(e2b.Sandbox, "create", create)
    monkeypatch.setenv("E2B_API_KEY", FAKE_KEY)
    with skyhub.sandbox.create(backend="e2b", workdir=str(tmp_path / "w"), pool="p1") as s:
        assert s.backend == "e2b"
    with E2BSandbox("my-template", network=True, workdir=str(tmp_path / "w"),
                    api_key="other", timeout_s=600):
        pass
    first, second = seen
    assert first["template"] == "base" and first["api_key"] == FAKE_KEY
    assert first["allow_internet_access"] is False and first["timeout"] == 3600
    assert first["metadata"]["skyhub.owner_pid"] == str(os.getpid())
    assert first["metadata"]["skyhub.pool"] == "p1"
    assert second["template"] == "my-template" and second["allow_internet_access"] is True
    assert second["api_key"] == "other" and second["timeout"] == 600
    with pytest.raises(ValueError, match="disagree"):
        E2BSandbox("a", template="b", _sdk_sandbox=FakeE2BSandbox())


def test_reap_kills_only_sandboxes_whose_owner_died(monkeypatch: pytest.MonkeyPatch) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = {"skyhub.owner_pid": str(os.getpid()), "skyhub.created": "0"}
    orphan = {"skyhub.owner_pid": str(dead.pid), "skyhub.created": "0"}
    young = {"skyhub.owner_pid": str(dead.pid), "skyhub.created": str(time.time())}

    class Pages:  # E2B's listing API is in its cloud: the SDK's paginator, stood in for
        has_next = True

        def next_items(self) -> list[Any]:
            self.has_next = False
            return [type("Info", (), {"sandbox_id": i, "metadata": m})()
                    for i, m in (("a", mine), ("b", orphan), ("c", young))]

    queries: list[Any] = []
    killed: list[str] = []
    monkeypatch.setattr(e2b.Sandbox, "list", lambda query, api_key: queries.append(query)
                        or Pages())
    monkeypatch.setattr(e2b.Sandbox, "kill", lambda sid, api_key: killed.append(sid) or True)
    monkeypatch.setenv("E2B_API_KEY", FAKE_KEY)
    assert backend.reap(older_than_s=60, dry_run=True) == ["b"] and killed == []
    assert backend.reap(older_than_s=60) == ["b"] and killed == ["b"]
    assert queries[0].metadata["skyhub.sandbox"] == "1"
    monkeypatch.delenv("E2B_API_KEY")
    assert backend.reap() == []


# ------------------------------------------------------------------------ E2B's real cloud
@pytest.mark.skipif(not os.environ.get("E2B_API_KEY"),
                    reason="needs E2B_API_KEY: E2B's cloud is not reachable from CI")
class TestLiveE2B:
    """The same behaviour against a real E2B sandbox (default template, workdir /work)."""

    @pytest.fixture(scope="class")
    def live(self) -> Iterator[E2BSandbox]:
        s = skyhub.sandbox.create(backend="e2b", timeout_s=600)
        assert isinstance(s, E2BSandbox)
        yield s
        s.close()

    def test_commands(self, live: E2BSandbox) -> None:
        assert live.exec("pwd").stdout.strip() == "/work"
        r = live.exec("echo out; echo err >&2; exit 3")
        assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
        assert live.exec("cat", stdin="in").stdout == "in"
        t = live.exec("sleep 30", timeout=2)
        assert t.timed_out and t.exit_code == 137 and t.duration_s < 15

    def test_network_is_off(self, live: E2BSandbox) -> None:
        r = live.exec("curl -sS -m 5 https://example.com >/dev/null", timeout=20)
        assert not r.ok

    def test_files_and_trees(self, live: E2BSandbox, tmp_path: Path) -> None:
        live.write_file("d/e.txt", b"\x00\xffbin")
        assert live.read_file("d/e.txt") == b"\x00\xffbin"
        with pytest.raises(FileNotFoundError):
            live.read_file("missing")
        (tmp_path / "t" / "x").mkdir(parents=True)
        (tmp_path / "t" / "x" / "y.txt").write_text("y")
        live.upload(tmp_path / "t", "up")
        live.download("up", tmp_path / "back")
        assert (tmp_path / "back" / "x" / "y.txt").read_text() == "y"

    def test_snapshot_restore_and_pause(self, live: E2BSandbox) -> None:
        live.write_file("s.txt", "clean")
        snap = live.snapshot()
        live.write_file("s.txt", "dirty")
        live.exec("nohup sleep 300 >/dev/null 2>&1 &")
        live.restore(snap)
        assert live.read_file("s.txt") == b"clean"
        assert live.exec("pgrep -f 'sleep 300' || true").stdout.strip() == ""
        live.pause()
        assert live.read_file("s.txt") == b"clean"
        assert live.sandbox_id not in backend.reap(dry_run=True)  # its owner is alive

    def test_close_kills_the_vm(self) -> None:
        s = skyhub.sandbox.create(backend="e2b", timeout_s=120)
        sid = s.sandbox_id
        s.close()
        s.close()
        assert e2b.Sandbox.kill(sid) is False  # False: E2B no longer knows it
