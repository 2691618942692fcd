"""A hostile agent against the local (bubblewrap) backend: a host escape through
restore, state carried across pool leases, oversized frames, unbounded tmpfs, deep trees that
break cleanup, and the host's /etc."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import skyhub.sandbox
from skyhub.sandbox import Pool, local, local_scratch
from skyhub.sandbox.base import ChannelBroken, ChannelTimeout
from skyhub.sandbox.local import LocalSandbox
from skyhub.sandbox.pipe_channel import DEFAULT_MAX_FRAME, PipeChannel, PipeStream

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from host_canary import make_canary
from proc_helpers import processes_with, unique_seconds

pytestmark = pytest.mark.hostile

ROOT = os.geteuid() == 0
ISOLATIONS = ["bwrap", pytest.param("none", marks=pytest.mark.skipif(
    not ROOT, reason="without bwrap only root gives each sandbox its own uid"))]


def eventually(check: Callable[[], bool], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def make(bwrap: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., LocalSandbox]]:
    monkeypatch.setattr(local, "_warned_weak", True)  # isolation="none" is asked for here
    made: list[LocalSandbox] = []

    def new(**kwargs: object) -> LocalSandbox:
        kwargs.setdefault("isolation", "bwrap")
        kwargs.setdefault("memory_mb", 512)
        sb = LocalSandbox(**kwargs)
        made.append(sb)
        return sb

    yield new
    for sb in made:
        sb.close()
    assert not [sb for sb in made if sb._root.exists()], "a scratch dir was left behind"


@pytest.fixture
def own_base(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A base dir for scratch dirs of our own, on tmpfs where there is one: on a VM's ext4 a
    3,000-level tree costs ~2 s to make and a racing restore ~50 ms, in RAM 0.2 s and 15 ms;
    depth and the race are what matter, not the file system."""
    ram = "/dev/shm" if os.path.isdir("/dev/shm") else None
    base = Path(tempfile.mkdtemp(prefix="skyhub-hostile-", dir=ram))
    os.chmod(base, 0o711)
    monkeypatch.setenv(local.ENV_DIR, str(base))
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False)


# ------------------------------------------------------------- 1: host escape via restore
SWAPPER = r"""
import os, sys
host = sys.argv[1]
open(".swapping", "w").close()
while True:
    for step in (lambda: os.makedirs("a/sub", exist_ok=True),
                 lambda: open("a/sub/f", "w").close(),
                 lambda: os.rename("a", "moved"),
                 lambda: os.symlink(host, "a"),
                 lambda: os.unlink("moved/sub/f"),
                 lambda: os.rmdir("moved/sub"),
                 lambda: os.rmdir("moved"),
                 lambda: os.unlink("a")):
        try:
            step()
        except OSError:
            pass
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_racing_symlink_swapper_cannot_make_restore_touch_the_host(
        own_base: Path, make: Callable[..., LocalSandbox], tmp_path: Path, isolation: str
        ) -> None:
    """A process that outlives its exec keeps swapping `a` for a symlink to a host directory
    while the host restores (as `KernelSession.reset` does, without killing processes)."""
    canary = make_canary(tmp_path / "host")
    before = canary()
    sb = make(isolation=isolation)
    sb.exec("mkdir -p a/sub && for i in $(seq 20); do echo snap > a/f$i; done && "
            "echo snap > a/sub/g && echo keep > keep.txt")
    snap = sb.snapshot()
    sb.write_file("swapper.py", SWAPPER)
    stream = sb.open_stream(["python3", "swapper.py", str(tmp_path / "host")])
    try:
        assert eventually(lambda: os.path.lexists(sb._work / ".swapping"))
        # before the fix, in 5 runs of 100: restore raised (tarfile's OutsideDestinationError)
        # in all 5, and chmodded or deleted host files in 4, after 8 to 83 restores
        for i in range(100):
            sb.restore(snap, kill_processes=False)
            assert canary() == before, f"restore {i} changed the host directory"
        sb.restore(snap)  # and with the swapper killed, exactly the snapshot again
        assert sb.exec("ls -A").stdout == "a\nkeep.txt\n"
    finally:
        stream.close()
    assert canary() == before


def test_a_racing_symlink_swapper_cannot_redirect_uploads_or_downloads(
        own_base: Path, make: Callable[..., LocalSandbox], tmp_path: Path) -> None:
    """The same swapper while the host copies trees in and out: a download never brings host
    files along (before the fix, 3 in 200 downloads copied the host directory's files), an
    upload never writes or chowns anything outside the workdir. (Racing copies may fail: the
    sandbox is changing the very tree being copied.)"""
    canary = make_canary(tmp_path / "host")
    before = canary()
    src = own_base / "src"
    (src / "sub").mkdir(parents=True)
    for i in range(20):
        (src / f"u{i}").write_text("upload")
    (src / "sub" / "g").write_text("upload")
    sb = make()
    sb.write_file("swapper.py", SWAPPER)
    stream = sb.open_stream(["python3", "swapper.py", str(tmp_path / "host")])
    try:
        assert eventually(lambda: os.path.lexists(sb._work / ".swapping"))
        for i in range(200):
            dest = own_base / f"down{i}"
            with contextlib.suppress(OSError, ValueError):
                sb.download("a", dest)
            leaked = [p for p in dest.rglob("*") if p.is_file() and b"canary" in p.read_bytes()
                      ] if dest.exists() else []
            assert not leaked, f"download {i} copied host files: {leaked}"
            if i % 10 == 0:
                with contextlib.suppress(OSError, ValueError):
                    sb.upload(src, "a/sub")
                assert canary() == before, f"upload {i} changed the host directory"
    finally:
        stream.close()


# ------------------------------------------------------------- 5: state across pool leases
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_pool_lease_returns_every_writable_location_clean(
        bwrap: str, isolation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "_warned_weak", True)
    tag, secs = uuid.uuid4().hex[:12], unique_seconds()
    dirty = f"skyhub-dirty-{tag}"
    with Pool(size=1, backend="local", memory_mb=512, isolation=isolation) as pool:
        assert pool.wait_ready(timeout=60) == 1
        with pool.lease() as sb:
            first = sb.id
            site = sb.exec(["python3", "-c", "import site; print(site.getusersitepackages())"]
                           ).stdout.strip()
            r = sb.exec(f"""set -e
                echo x > {dirty}; echo x > /tmp/{dirty}; echo x > /dev/shm/{dirty}
                echo x > "$HOME/.{dirty}"; echo x > "${{TMPDIR:-/tmp}}/{dirty}"
                printf '[alias]\\n  st = !echo HIJACKED\\n' > ~/.gitconfig
                echo 'echo HIJACKED' >> ~/.bashrc
                mkdir -p {site} && echo 'print("HIJACKED")' > {site}/usercustomize.py
                python3 -c pass""")
            assert r.ok and "HIJACKED" in r.stdout, r  # the hooks work for this user
            # a daemon that outlives its command: setsid, double fork, environment cleared
            daemon = sb.open_stream(["env", "-i", "/bin/sh", "-c",
                                     f"setsid sh -c '(sleep {secs}; touch {dirty}-late) &'"
                                     " </dev/null >/dev/null 2>&1; exec cat"])
            assert eventually(lambda: processes_with(f"sleep {secs}") != [])
        pool.wait_ready(timeout=60)
        try:
            with pool.lease() as sb:
                assert sb.id == first, "the pool should hand out the same sandbox again"
                assert eventually(lambda: processes_with(f"sleep {secs}") == []), \
                    "the previous user's daemon survived the lease"
                r = sb.exec(f"""ls -A; cat /tmp/{dirty} /dev/shm/{dirty} "$HOME/.{dirty}" \
                    "${{TMPDIR:-/tmp}}/{dirty}" 2>/dev/null; git config --global --list \
                    2>/dev/null; bash -ic true 2>/dev/null; python3 -c pass; true""")
                assert r.ok and r.stdout == "", r
                if sb.isolation == "none":  # the host's world-writable dirs, as they are
                    assert not [p for d in ("/tmp", "/dev/shm", "/var/tmp")
                                if os.path.isdir(d) for p in os.listdir(d) if dirty in p]
        finally:
            daemon.close()


# ------------------------------------------------------------- 7: frame budgets
HUGE_REPLY = r"""
import os, struct, sys, time
sys.stdin.buffer.read(4)                      # the request's header is enough
os.write(1, struct.pack(">I", int(sys.argv[1])))
for _ in range(int(sys.argv[2])):             # MiB of body that follow the header
    os.write(1, b"\0" * (1 << 20))
time.sleep(120)
"""


def reply_stream(announced: int, body_mib: int) -> PipeStream:
    return PipeStream([sys.executable, "-I", "-c", HUGE_REPLY, str(announced), str(body_mib)],
                      env={"PATH": os.environ["PATH"]}, cwd="/")


@pytest.mark.parametrize(("announced", "body_mib"), [(0xFFFFFFFF, 0), (300 << 20, 300)])
def test_a_frame_over_the_budget_breaks_the_channel_without_buffering_it(
        announced: int, body_mib: int) -> None:
    chan = PipeChannel(reply_stream(announced, body_mib))
    try:
        with pytest.raises(ChannelBroken, match="budget") as e:
            chan.request({"op": "ping"}, timeout=60)
        assert not isinstance(e.value, ChannelTimeout)
        assert len(chan._buf) <= DEFAULT_MAX_FRAME
        with pytest.raises(ChannelBroken):  # and it stays broken: the pipe is out of step
            chan.request({"op": "ping"}, timeout=60)
    finally:
        chan.stream.proc.kill()  # it is blocked writing the rest: no need to wait for it
        chan.close()


def test_the_frame_budget_is_configurable(make: Callable[..., LocalSandbox]) -> None:
    chan = PipeChannel(reply_stream(2 << 20, 2), max_frame=1 << 20)
    try:
        with pytest.raises(ChannelBroken, match="budget"):
            chan.request({"op": "ping"}, timeout=60)
    finally:
        chan.stream.proc.kill()
        chan.close()
    sb = make()  # a sandbox's channels have the default budget
    sb.write_file("huge.py", HUGE_REPLY)
    chan = sb.spawn(["python3", "huge.py", str(0xFFFFFFFF), "0"])
    try:
        with pytest.raises(ChannelBroken, match="budget"):
            chan.request({"op": "ping"}, timeout=60)
    finally:
        sb.kill_processes()
        chan.close()


# ------------------------------------------------------------- 8: bounded tmpfs and files
def test_tmp_dev_shm_and_files_are_bounded(make: Callable[..., LocalSandbox]) -> None:
    sb = make(memory_mb=256, disk_mb=32)
    sizes = sb.exec(["python3", "-c", "import os\nfor d in ('/tmp', '/dev/shm'):\n"
                     "    s = os.statvfs(d); print(s.f_blocks * s.f_frsize)"]).stdout.split()
    assert sizes and all(0 < int(n) <= 32 << 20 for n in sizes), sizes
    for where in ("/tmp/big", "/dev/shm/big", "big", "/dev/big"):
        r = sb.exec(f"head -c {40 << 20} /dev/zero > {where}; echo rc=$?; "
                    f"wc -c < {where} 2>/dev/null || echo 0")
        assert "rc=0" not in r.stdout, (where, r)
        assert int(r.stdout.split()[-1]) <= 32 << 20, (where, r)
    r = sb.exec(["python3", "-c", "f = open('py-big', 'wb')\ntry:\n"
                 f"    f.write(bytes({40 << 20})); f.flush()\nexcept OSError as e:\n"
                 "    print(e.strerror)"])
    assert "File too large" in r.stdout, r
    assert sb.exec("rm -f big py-big && echo fine").stdout == "fine\n"  # the sandbox still works
    assert not (sb._work / "big").exists()


def test_tmpfs_bounds_follow_memory_mb_by_default(make: Callable[..., LocalSandbox]) -> None:
    sb = make(memory_mb=128)
    r = sb.exec(["python3", "-c", "import os\nfor d in ('/tmp', '/dev/shm'):\n"
                 "    s = os.statvfs(d); print(s.f_blocks * s.f_frsize)"])
    assert r.ok and all(0 < int(n) <= 128 << 20 for n in r.stdout.split()), r


# ------------------------------------------------------------- 9: deep trees
DEEP_TREE = ("import os\nfor i in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\n"
             "open('bottom.txt', 'w').write('deep')\n")


def test_close_removes_a_scratch_dir_whatever_its_depth(
        own_base: Path, make: Callable[..., LocalSandbox]) -> None:
    sb = make()
    assert sb.exec(["python3", "-c", DEEP_TREE], timeout=120).ok
    root = sb._root
    sb.close()
    assert not root.exists()


def reap_all(**kwargs: object) -> list[str]:
    """`skyhub.sandbox.reap`, the function, reached through the package as users reach it
    (it stays the function after the submodule of the same name was imported)."""
    importlib.import_module("skyhub.sandbox.reap")  # the submodule must not shadow it
    return skyhub.sandbox.reap(**kwargs)  # type: ignore[arg-type]


def orphan(sb: LocalSandbox, **labels: str) -> None:
    """Make `sb` look like the sandbox of a process that died."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    label = sb._root / local.LABEL_FILE
    data = json.loads(label.read_text())
    data.update({"skyhub.owner_pid": str(dead.pid), "skyhub.owner_start": "-1", **labels})
    label.write_text(json.dumps(data))


def test_reap_goes_on_past_a_deep_tree_and_a_bad_label(
        reaping: None, own_base: Path, make: Callable[..., LocalSandbox]) -> None:
    deep, bad, plain, live = make(), make(), make(), make()
    assert deep.exec(["python3", "-c", DEEP_TREE], timeout=120).ok
    orphan(deep)
    orphan(bad, **{"skyhub.uid": "not-a-uid", "skyhub.created": "garbage"})
    orphan(plain)
    errors: list[str] = []
    removed = reap_all(backends=("local",), errors=errors)
    assert sorted(removed) == sorted(f"local:{s.id}" for s in (deep, bad, plain)), errors
    assert errors == []
    assert not any(s._root.exists() for s in (deep, bad, plain)) and live._root.exists()
    assert live.exec("echo alive").stdout == "alive\n"


def test_reap_reports_what_it_could_not_remove_and_reaps_the_rest(
        reaping: None, own_base: Path, make: Callable[..., LocalSandbox],
        monkeypatch: pytest.MonkeyPatch) -> None:
    stuck, plain = make(), make()
    orphan(stuck)
    orphan(plain)
    real = local_scratch.remove_tree

    def flaky(path: str | Path) -> None:
        if stuck.id in str(path):
            raise OSError(16, "Device or resource busy", str(path))
        real(path)

    monkeypatch.setattr(local_scratch, "remove_tree", flaky)

    def docker_down(**kwargs: object) -> list[str]:
        raise RuntimeError("the Docker daemon went away mid-reap")

    from skyhub.sandbox import docker_client

    monkeypatch.setattr(docker_client, "docker_available", lambda: True)
    monkeypatch.setattr(docker_client, "reap", docker_down)
    errors: list[str] = []
    removed = reap_all(errors=errors)
    assert removed == [f"local:{plain.id}"]
    assert any(stuck.id in e and "busy" in e for e in errors), errors
    assert any(e.startswith("docker:") and "went away" in e for e in errors), errors
    assert stuck._root.exists() and not plain._root.exists()
    monkeypatch.setattr(local_scratch, "remove_tree", real)  # so that closing it works


def test_reap_cli_reaps_a_deep_orphan(reaping: None, own_base: Path,
                                      make: Callable[..., LocalSandbox]) -> None:
    deep = make()
    assert deep.exec(["python3", "-c", DEEP_TREE], timeout=120).ok
    orphan(deep)
    exe = Path(sys.executable).parent / "skyhub"
    r = subprocess.run([str(exe), "sandbox", "reap"], capture_output=True, text=True,
                       timeout=300, env={**os.environ, local.ENV_DIR: str(own_base)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"removed local:{deep.id}" in r.stdout and not deep._root.exists()


# ------------------------------------------------------------- 12: the host's /etc
def test_the_host_etc_is_not_visible_but_tools_still_work(make: Callable[..., LocalSandbox]
                                                          ) -> None:
    secret = Path(f"/etc/skyhub-test-secret-{uuid.uuid4().hex[:8]}") if ROOT else None
    if secret is not None:
        secret.write_text("host secret")
    try:
        sb = make()
        r = sb.exec("ls -A /etc; cat /etc/passwd /etc/group")
        assert r.ok, r
        listing = r.stdout
        if secret is not None:
            assert secret.name not in listing and "host secret" not in listing
        host_users = {line.split(":")[0] for line in Path("/etc/passwd").read_text().splitlines()
                      if line and not line.startswith("#")}
        shown = {line.split(":")[0] for line in listing.splitlines() if line.count(":") >= 3}
        assert shown & host_users <= {"root", "nobody"}, shown & host_users
        for private in ("shadow", "gitconfig", "ssh", "machine-id", "pip.conf"):
            assert sb.exec(f"test -e /etc/{private}").exit_code != 0, private
        r = sb.exec("""set -e
            id -un; echo "$HOME"; bash -lc 'echo bash-ok'
            python3 -c 'import ssl, json, sqlite3, ctypes.util; print("py-ok")'
            git init -q repo && cd repo && git -c user.email=a@b -c user.name=a commit -q \
                --allow-empty -m m && git log --format=%s""")
        assert r.ok and r.stdout.split() == ["sandbox", "/work", "bash-ok", "py-ok", "m"], r
    finally:
        if secret is not None:
            secret.unlink()
