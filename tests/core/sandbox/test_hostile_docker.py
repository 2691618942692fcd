"""A hostile agent against the docker backend: forged replies through Python
startup hooks, state carried between leases, oversized frames, unbounded disk, reap and
restore that a hostile tree must not stop."""

from __future__ import annotations

import contextlib
import errno
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest

from skyhub.sandbox import Pool, base, images
from skyhub.sandbox import docker_client as dsb
from skyhub.sandbox.base import ChannelBroken, ChannelTimeout
from skyhub.sandbox.docker import DockerSandbox
from skyhub.sandbox.docker_channel import _Demux

pytestmark = [pytest.mark.hostile, pytest.mark.docker]


@pytest.fixture(scope="module")
def image(docker_daemon: None) -> str:
    return images.build(["default"], quiet=True)[0]


@pytest.fixture(scope="module")
def foreign_image(image: str) -> Iterator[str]:
    """skyhub's image under another name: handled as an image skyhub did not build."""
    import docker.errors

    client = dsb.get_client()
    tag = f"skyhub-test/hostile-foreign:{uuid.uuid4().hex[:8]}"
    client.images.get(image).tag(tag)
    yield tag
    with contextlib.suppress(docker.errors.NotFound):
        client.images.remove(tag)


# --------------------------------------------------- hooks that forge the replies
# A hook that rewrites every exec reply of the Python process it loads into: exit 0, "PASS".
FORGE = (
    "import base64, json\n"
    "_dumps = json.dumps\n"
    "def dumps(obj, *a, **k):\n"
    "    if isinstance(obj, dict) and 'exit_code' in obj:\n"
    "        obj = dict(obj, exit_code=0, stdout=base64.b64encode(b'PASS\\n').decode())\n"
    "    return _dumps(obj, *a, **k)\n"
    "json.dumps = dumps\n")
USER_SITE = "$(python3 -c 'import site; print(site.getusersitepackages())')"
PLANTS = {
    "usercustomize": f'mkdir -p "{USER_SITE}" && cat > "{USER_SITE}/usercustomize.py"',
    "sitecustomize in the user site": f'mkdir -p "{USER_SITE}" && '
                                      f'cat > "{USER_SITE}/sitecustomize.py"',
    "a .pth file in the user site": f'mkdir -p "{USER_SITE}" && cat > "$HOME/forge.py" && '
                                    f'echo "import sys; sys.path.append(\'$HOME\'); '
                                    f'import forge" > "{USER_SITE}/zz-forge.pth"',
    "json.py in the workdir and /tmp": "tee json.py > /tmp/json.py",
    "PYTHONSTARTUP in ~/.profile and ~/.bashrc": 'cat > "$HOME/startup.py" && '
        'echo "export PYTHONSTARTUP=$HOME/startup.py PYTHONPATH=$HOME" | '
        'tee -a "$HOME/.profile" >> "$HOME/.bashrc" && cp "$HOME/startup.py" "$HOME/json.py"',
}


@pytest.mark.parametrize("where", list(PLANTS))
def test_python_hooks_cannot_forge_the_restarted_agents_replies(image: str, where: str) -> None:
    with DockerSandbox() as sb:
        assert sb.exec(PLANTS[where], stdin=FORGE).ok
        assert sb.exec("kill -9 -1").exit_code == 137     # the agent dies; the host restarts it
        r = sb.exec("echo FAIL; exit 1")                    # e.g. a verifier's verdict
        assert (r.exit_code, r.stdout) == (1, "FAIL\n")
        r = sb.exec(["sh", "-c", "echo FAIL; exit 3"])
        assert (r.exit_code, r.stdout) == (3, "FAIL\n")


# ------------------------------------------- nothing survives a restore or a lease
# Every directory the run user can change (writable, or its own), top-most only, /proc and
# /sys aside: what a lease must give back as it was.
PLACES = ('find / \\( -path /proc -o -path /sys \\) -prune -o -type d '
          '\\( -writable -o -user "$(id -u)" \\) -print -prune 2>/dev/null | sort')
LISTING = ('for p in $(' + PLACES + '); do find "$p" \\( -path /proc -o -path /sys \\) -prune '
           '-o -printf "%p|%y|%s|%m|%u\\n" 2>/dev/null | sort; done; '
           'ipcs -m -q -s | grep -c "^0x" || true')


def dirty(sb: DockerSandbox, token: str) -> None:
    """Write into every writable place, plant hooks for the next user, start daemons."""
    script = f"""
    for p in $({PLACES}); do
        mkdir -p "$p/.{token}/deep" 2>/dev/null && echo {token} > "$p/.{token}/deep/f"
        echo {token} > "$p/{token}.txt" 2>/dev/null
    done
    git config --global alias.st '!echo {token}'
    echo 'echo {token}' >> ~/.bashrc
    site=$(python3 -c 'import site; print(site.getusersitepackages())')
    mkdir -p "$site" && echo 'print("{token}")' > "$site/usercustomize.py"
    touch /dev/mqueue/{token}
    ipcmk -M 4096 >/dev/null && ipcmk -Q >/dev/null
    (setsid sh -c 'while :; do sleep 1; done' {token}-loop >/dev/null 2>&1 &)
    nohup sleep 9999.{len(token)} >/dev/null 2>&1 &
    python3 -c 'import os, sys, time
if os.fork(): os._exit(0)
os.setsid()
if os.fork(): os._exit(0)
time.sleep(9999)' {token}-daemon >/dev/null 2>&1 &
    """
    r = sb.exec(["bash", "-c", script], timeout=60)
    assert r.exit_code == 0, r
    # the daemons start in the background: under load the double-forking one may still be
    # between its forks (`ps` shows it as `[python3]`) when the script returns
    deadline = time.monotonic() + 30
    while True:
        seen = sb.exec("ps -eo args=").stdout
        if (f"{token}-loop" in seen and f"{token}-daemon" in seen) or \
                time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert f"{token}-loop" in seen and f"{token}-daemon" in seen, seen
    assert token in sb.exec(LISTING).stdout


def assert_clean(sb: DockerSandbox, token: str, listing: str) -> None:
    assert sb.exec(LISTING).stdout == listing                 # every place as it was
    assert token not in sb.exec("ls -a /tmp ~ /dev/shm /dev/mqueue /var/tmp").stdout
    assert sb.exec("git config --global --get alias.st").exit_code != 0
    assert token not in sb.exec(["bash", "-ic", "true"]).stdout
    assert token not in sb.exec(["python3", "-c", "pass"]).stdout
    # no process of the previous user: only the agent and this probe run as the user (by
    # the real uid in status: an undumpable process's /proc entry belongs to root)
    probe = ("import os\nme = {os.getpid()}\nfor p in os.listdir('/proc'):\n"
             "    try:\n"
             "        uid = [l for l in open(f'/proc/{p}/status') if l.startswith('Uid:')]\n"
             "        if int(p) not in me and int(uid[0].split()[1]) == os.getuid():\n"
             "            print(open(f'/proc/{p}/cmdline').read().replace('\\0', ' '))\n"
             "    except (OSError, ValueError):\n"
             "        pass")
    left = sb.exec(["python3", "-c", probe]).stdout.splitlines()
    assert len(left) == 1 and "/opt/skyhub/guest.pyz" in left[0], left


def test_pool_lease_hands_out_every_writable_place_clean_and_no_process(image: str) -> None:
    token = f"lease{uuid.uuid4().hex[:8]}"
    with Pool(size=1, backend="docker", memory_mb=512) as pool:
        assert pool.wait_ready(timeout=120) == 1
        with pool.lease() as sb:
            first, listing = sb.id, sb.exec(LISTING).stdout
            dirty(sb, token)
        assert pool.wait_ready(timeout=120) == 1
        with pool.lease() as sb:
            assert sb.id == first                                 # the same sandbox, reused
            assert_clean(sb, token, listing)


@pytest.mark.parametrize("kind", ["skyhub image", "foreign image", "foreign image as root"])
def test_restore_gives_back_every_writable_place(request: pytest.FixtureRequest,
                                                  kind: str) -> None:
    token = f"restore{uuid.uuid4().hex[:8]}"
    kwargs: dict[str, str] = {}
    if kind != "skyhub image":
        kwargs["image"] = request.getfixturevalue("foreign_image")
    else:
        request.getfixturevalue("image")
    if kind.endswith("as root"):
        kwargs["user"] = "root"
    with DockerSandbox(memory_mb=512, **kwargs) as sb:
        sb.write_file("keep.txt", "clean")
        snap = sb.snapshot()
        listing = sb.exec(LISTING).stdout
        if kind.endswith("as root"):  # root owns the image's files: it can change them all
            assert sb.exec(f"echo {token} > /etc/{token} && echo {token} >> /etc/profile && "
                           f"echo {token} > /usr/bin/{token}").ok
            assert sb.exec(f"nohup sleep 999.{len(token)} >/dev/null 2>&1 &").ok
        else:
            dirty(sb, token)
        sb.restore(snap)
        assert sb.read_file("keep.txt") == b"clean"
        if kind.endswith("as root"):
            assert sb.exec(LISTING).stdout == listing
            assert token not in sb.exec("ls /etc /usr/bin; cat /etc/profile; "
                                        "ps -eo args").stdout
        else:
            assert_clean(sb, token, listing)
        assert sb.exec("echo ok").stdout == "ok\n"


# --------------------------------------------------------------- frame budgets
HUGE_REPLY = (
    "import struct, sys\n"
    "sys.stdin.buffer.read(4)\n"
    "out = sys.stdout.buffer\n"
    "out.write(struct.pack('>I', 0xFFFFFFF0)); out.flush()\n"
    "block = bytes(1 << 20)\n"
    "for _ in range(200):\n"     # 200 MB, then silence: the host must not wait for the rest
    "    out.write(block)\n"
    "out.flush()\n"
    "sys.stdin.buffer.read()\n")


def test_a_huge_length_prefix_breaks_the_channel_at_once(image: str) -> None:
    with DockerSandbox(memory_mb=512) as sb:
        sb.write_file("huge.py", HUGE_REPLY)
        chan = sb.spawn(["python3", "huge.py"])
        try:
            with pytest.raises(ChannelBroken, match="budget") as err:
                chan.request({"op": "ping"}, 60)
            assert not isinstance(err.value, ChannelTimeout)
        finally:
            chan.close()
        assert sb.exec("echo ok").stdout == "ok\n"


def test_docker_frames_bigger_than_the_budget_are_refused() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(bytes([1, 0, 0, 0]) + struct.pack(">I", 0xFFFFFFF0) + bytes(4096))
        with pytest.raises(ChannelBroken, match="budget"):
            _Demux(ours, max_frame=1 << 20).read(4)


# a well-formed reply of 3 MB to every request
BIG_REPLY = (
    "import json, struct, sys\n"
    "while True:\n"
    "    head = sys.stdin.buffer.read(4)\n"
    "    if len(head) < 4:\n"
    "        break\n"
    "    req = json.loads(sys.stdin.buffer.read(struct.unpack('>I', head)[0]))\n"
    "    body = json.dumps({'id': req['id'], 'ok': True, 'pad': 'x' * 3000000}).encode()\n"
    "    sys.stdout.buffer.write(struct.pack('>I', len(body)) + body)\n"
    "    sys.stdout.buffer.flush()\n")


@pytest.mark.parametrize(("max_reply_mb", "refused"), [(1, True), (64, False)])
def test_max_reply_mb_is_the_budget_of_a_reply(image: str, max_reply_mb: int,
                                               refused: bool) -> None:
    with DockerSandbox(memory_mb=512, max_reply_mb=max_reply_mb, max_output=4096) as sb:
        sb.write_file("big.py", BIG_REPLY)
        chan = sb.spawn(["python3", "big.py"])
        try:
            if refused:
                with pytest.raises(ChannelBroken, match="budget"):
                    chan.request({"op": "ping"}, 60)
            else:
                assert len(chan.request({"op": "ping"}, 60)["pad"]) == 3000000
        finally:
            chan.close()


def test_reading_a_sparse_giant_is_a_file_error_not_a_host_allocation(image: str) -> None:
    with DockerSandbox(memory_mb=256, disk_mb=32) as sb:
        assert sb.exec("truncate -s 4G giant && du -k giant").stdout.split()[0] == "0"
        with pytest.raises(OSError, match="over the") as err:
            sb.read_file("giant")
        assert err.value.errno == errno.EFBIG or "File too large" in str(err.value)
        assert sb.exec("echo ok").stdout == "ok\n"


# ----------------------------------------------------------------- disk bounds
def test_writes_past_disk_mb_fail_inside_and_the_sandbox_answers(image: str) -> None:
    with DockerSandbox(memory_mb=512, disk_mb=32) as sb:
        for where in ("/work/big", "/tmp/big", "$HOME/big", "/var/tmp/big"):
            r = sb.exec(f"dd if=/dev/zero of={where} bs=1M count=64")
            assert r.exit_code != 0 and "No space left on device" in r.stderr, (where, r)
            size = int(sb.exec(f"stat -c %s {where}").stdout)
            assert size <= 32 << 20
            sb.exec(f"rm -f {where}")
        assert sb.exec("echo ok").stdout == "ok\n"


def test_foreign_images_bound_each_file_by_disk_mb(foreign_image: str) -> None:
    with DockerSandbox(foreign_image, memory_mb=512, disk_mb=16) as sb:
        r = sb.exec("dd if=/dev/zero of=big bs=1M count=64")
        assert r.exit_code != 0, r
        assert int(sb.exec("stat -c %s big").stdout) <= 16 << 20
        stream = sb.open_stream(["sh", "-c", "dd if=/dev/zero of=big2 bs=1M count=64 2>&1; "
                                 "echo rc=$?"])
        try:
            out = b""
            while b"rc=" not in out:
                out += stream.read(30)
        finally:
            stream.close()
        assert b"rc=0" not in out
        assert int(sb.exec("stat -c %s big2").stdout) <= 16 << 20
        assert sb.exec("echo ok").stdout == "ok\n"


# ------------------------------------------------------ reap and deep trees
def _orphan(image: str, pid: int) -> object:
    labels = dict(base.owner_labels(), **{base.LABEL_OWNER_PID: str(pid),
                                          base.LABEL_CREATED: "0"})
    return dsb.get_client().containers.create(image, ["sleep", "infinity"], labels=labels,
                                              name=f"skyhub-test-{uuid.uuid4().hex[:10]}",
                                              network_mode="none")


def test_reap_goes_on_past_an_entry_it_cannot_remove(reaping: None, image: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import docker.errors

    dead = subprocess.Popen(["true"])
    dead.wait()
    stuck, other = _orphan(image, dead.pid), _orphan(image, dead.pid)
    api = dsb.get_client().api
    remove = api.remove_container

    def flaky(container: str, **kw: object) -> None:
        if container == stuck.id:
            raise docker.errors.APIError("removal of container is already in progress")
        remove(container, **kw)

    monkeypatch.setattr(api, "remove_container", flaky)
    try:
        errors: list[str] = []
        removed = dsb.reap(errors=errors)
        assert other.name in removed and stuck.name not in removed
        assert len(errors) == 1 and stuck.name in errors[0] and "in progress" in errors[0]
        # (another worker's containers may go while they are listed)
        names = {c.name for c in dsb.get_client().containers.list(all=True,
                                                                   ignore_removed=True)}
        assert other.name not in names and stuck.name in names
    finally:
        monkeypatch.undo()
        for c in (stuck, other):
            with contextlib.suppress(Exception):
                c.remove(force=True)


DEEP = ("import os\nos.chdir({where!r})\nfor _ in range(3000):\n    os.mkdir('d')\n"
        "    os.chdir('d')\nopen('leaf', 'w').write('x')\n")


@pytest.mark.parametrize("where", ["/work", "/tmp"])
def test_restore_recovers_from_a_3000_level_tree(image: str, where: str) -> None:
    with DockerSandbox(memory_mb=512) as sb:
        sb.write_file("keep.txt", "clean")
        snap = sb.snapshot()
        assert sb.exec(["python3", "-c", DEEP.format(where=where)]).ok
        sb.restore(snap)
        assert sb.exec("ls -A /work; ls -A /tmp").stdout == "keep.txt\n"
        sb.restore(snap)                                         # and again, as a pool would
        assert sb.exec("echo ok").stdout == "ok\n"


def test_restore_replaces_a_container_that_no_longer_runs(image: str) -> None:
    with DockerSandbox(memory_mb=512) as sb:
        sb.write_file("keep.txt", "clean")
        snap = sb.snapshot()
        old = sb.container.id
        sb.container.kill()                      # gone from under the agent: it cannot restore
        sb.restore(snap)
        assert sb.container.id != old and sb.read_file("keep.txt") == b"clean"
        sb.write_file("keep.txt", "dirty")
        sb.restore(snap)                          # the snapshots came along
        assert sb.read_file("keep.txt") == b"clean"
        assert [c.id for c in dsb.get_client().containers.list(
            all=True, filters={"name": sb.name})] == [sb.container.id]


def test_reap_survives_a_listing_of_bad_labels(reaping: None, image: str) -> None:
    """A container with labels reap cannot parse is left alone, not a crash."""
    labels = {base.LABEL: "1", base.LABEL_OWNER_PID: "not-a-pid",
              base.LABEL_OWNER_HOST: socket.gethostname(), base.LABEL_CREATED: "yesterday"}
    c = dsb.get_client().containers.create(image, ["true"], labels=labels,
                                           name=f"skyhub-test-{uuid.uuid4().hex[:10]}",
                                           network_mode="none")
    try:
        assert c.name not in dsb.reap()
        assert c.name in {s["name"] for s in dsb.list_sandboxes()}
    finally:
        c.remove(force=True)

