"""Downloads from a hostile sandbox.

A sandbox's tree is the agent's, and so (in a root image, or on E2B) may be the archive the
host receives for it. Python 3.11.7's `tarfile` data filter lets a symlink chain that pushes
`realpath` past PATH_MAX write outside the destination (the CVE-2025-4517 family; the first
archive below does it on this interpreter), and a plain copy keeps `result.txt -> /etc/shadow`
as it is. Every backend's `download()` now goes through `skyhub.sandbox.extract`: these tests
feed it the hostile archives directly, then through the local and docker backends (the
docker one with a guest the agent rewrote), and check with the kernel (stat through every
name of `dest`) that nothing outside `dest` was written or can be read through it.
"""

from __future__ import annotations

import base64
import io
import os
import stat
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from skyhub.sandbox.extract import extract, read_tar

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from hostile_archives import SECRET, D, F, H, S, assert_contained, realpath_chain, tar_of

pytestmark = [pytest.mark.hostile]

# name -> archive, given the outside directory (a sibling of `dest`)
HOSTILE: dict[str, Callable[[Path], bytes]] = {
    "realpath chain past PATH_MAX (the CVE's form)":
        lambda out: realpath_chain("../outside", real_names=False),
    "realpath chain past PATH_MAX (real names)":
        lambda out: realpath_chain("../outside", real_names=True),
    "absolute names": lambda out: tar_of((str(out / "abs.txt"), F, "x"),
                                         (str(out / "secret.txt"), F, "overwritten")),
    "names with ..": lambda out: tar_of(("../outside/dotdot.txt", F, "x"),
                                        ("a/../../outside/secret.txt", F, "overwritten")),
    "hard links out of the tree": lambda out: tar_of(
        ("abs", H, str(out / "secret.txt")), ("rel", H, "../outside/secret.txt"),
        ("abs", F, "overwritten"), ("rel", F, "overwritten")),
    "a symlink, then a file through it": lambda out: tar_of(
        ("d", S, str(out)), ("d/through.txt", F, "x"), ("r", S, "../outside"),
        ("r/through.txt", F, "x"), ("r/secret.txt", F, "overwritten")),
    "a symlink to a host file (result.txt -> /etc/shadow)": lambda out: tar_of(
        ("result.txt", S, str(out / "secret.txt")),
        ("rel.txt", S, "../outside/secret.txt")),
    "out through an in-tree link's ..": lambda out: tar_of(
        ("sub", D, ""), ("sub/up", S, ".."), ("esc", S, "sub/up/../outside/secret.txt")),
    "a link repointed by a later member": lambda out: tar_of(
        ("a/b/c/d", D, ""), ("s", S, "a/b/c/d"),
        ("esc", S, "s/../../../../outside/secret.txt"), ("s", S, "a")),
    "a directory where a link was": lambda out: tar_of(
        ("L", D, ""), ("x/y/z", D, ""), ("L", S, "x/y/z"),
        ("esc", S, "L/../../outside/secret.txt")),
    "a link loop and an overlong target": lambda out: tar_of(
        ("p", S, "q"), ("q", S, "p"), ("long", S, "x/" * 3000)),
    "a FIFO and a device node": lambda out: tar_of(
        ("fifo", tarfile.FIFOTYPE, ""), ("null", tarfile.CHRTYPE, "")),
}


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    return dest, outside


def test_the_chain_archive_is_a_real_attack_on_tarfiles_filter(places: tuple[Path, Path]
                                                                ) -> None:
    """What `download()` used before (tarfile's data filter, docker and E2B): on this
    interpreter the chain writes outside `dest`. If a Python upgrade fixes it, this test
    says so, and the chain tests below keep their point (a hostile archive) anyway."""
    dest, outside = places
    dest.mkdir()
    data = realpath_chain("../outside", real_names=False)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        try:
            tar.extractall(dest, filter="data")
        except tarfile.FilterError:
            pytest.fail("tarfile's data filter refused the chain: this Python is fixed "
                        "(CVE-2025-4517); keep the tests, drop this one")
    assert (outside / "pwned.txt").exists()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_archive_writes_nothing_outside_and_links_nothing_out(
        places: tuple[Path, Path], name: str) -> None:
    dest, outside = places
    skipped = extract(HOSTILE[name](outside), dest)
    assert skipped, "something of it should have been left out"
    assert_contained(dest, outside)


def test_links_inside_the_tree_and_plain_files_are_kept(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    data = tar_of((".", D, ""), ("./bin", D, ""), ("./bin/python3.11", F, "elf"),
                  ("./bin/python", S, "python3.11"), ("./lib", D, ""), ("./lib64", S, "lib"),
                  ("./node_modules/pkg/cli.js", F, "js"),
                  ("./node_modules/.bin/cli", S, "../pkg/cli.js"),
                  ("./hard", H, "./bin/python3.11"), ("./dangling", S, "not/there"))
    assert extract(data, dest) == []
    assert (dest / "bin" / "python").read_text() == "elf"
    assert os.readlink(dest / "lib64") == "lib" and (dest / "lib64").is_dir()
    assert (dest / "node_modules" / ".bin" / "cli").read_text() == "js"
    assert os.stat(dest / "hard").st_ino == os.stat(dest / "bin" / "python3.11").st_ino
    assert os.readlink(dest / "dangling") == "not/there"


def test_a_single_file_or_link_lands_under_its_name(tmp_path: Path) -> None:
    extract(tar_of((".", F, "one")), tmp_path / "a", name="report.txt")
    assert (tmp_path / "a" / "report.txt").read_text() == "one"
    skipped = extract(tar_of((".", S, "/etc/shadow")), tmp_path / "b", name="result.txt")
    assert skipped and not os.path.lexists(tmp_path / "b" / "result.txt")


def test_owners_and_special_mode_bits_are_not_taken_from_the_archive(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, mode in (("suid", 0o4777), ("exe", 0o755), ("dir", 0o1777)):
            info = tarfile.TarInfo(name)
            info.mode, info.uid, info.gid = mode, 4242, 4242
            if name == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))
    extract(buf.getvalue(), tmp_path / "dest")
    for name, mode in (("suid", 0o755), ("exe", 0o755), ("dir", 0o755)):
        st = os.stat(tmp_path / "dest" / name)
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (mode, os.getuid()), name


def test_pax_and_gnu_long_names_are_read_and_garbage_ends_the_listing() -> None:
    long = "x" * 300 + "/" + "y" * 200
    buf = io.BytesIO()
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
            info = tarfile.TarInfo(long)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"abc"))
            link = tarfile.TarInfo("l")
            link.type, link.linkname = tarfile.SYMTYPE, "z" * 400
            tar.addfile(link)
        members, problems = read_tar(buf.getvalue())
        assert [(m.name, m.kind) for m in members] == [(long, "reg"), ("l", "sym")]
        assert members[1].linkname == "z" * 400 and not problems
        data = buf.getvalue()
        assert data[members[0].offset:members[0].offset + 3] == b"abc"
    garbled = bytearray(buf.getvalue())
    garbled[512 * 4 + 10] ^= 0xFF  # the second member's first header: its checksum fails
    members, problems = read_tar(bytes(garbled))
    assert [m.name for m in members] == [long] and problems


# ----------------------------------------------------------------------------------- local
TREE = ("echo real > real.txt && ln -s real.txt ok && ln -s {secret} result.txt && "
        "ln -s /etc/shadow shadow && mkdir sub && ln -s .. sub/up && "
        "ln -s sub/up/../../../../../../../../../../../..{secret} esc && "
        "ln -s ../../../../../../../../../../../..{outside} far")


def test_local_download_leaves_out_links_to_host_files(bwrap: str, places: tuple[Path, Path],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from skyhub.sandbox import local
    from skyhub.sandbox.local import LocalSandbox

    monkeypatch.setattr(local, "_warned_weak", True)
    dest, outside = places
    with LocalSandbox(isolation="bwrap", memory_mb=512) as sb:
        r = sb.exec(TREE.format(secret=outside / "secret.txt", outside=outside))
        assert r.ok, r
        sb.download(".", dest)
    assert_contained(dest, outside)
    assert (dest / "ok").read_text() == "real\n"
    for name in ("result.txt", "shadow", "esc", "far"):
        assert not os.path.lexists(dest / name), name


# --------------------------------------------------------------------------------- docker
@pytest.fixture(scope="module")
def image(docker_daemon: None) -> str:
    from skyhub.sandbox import images

    return images.build(["default"], quiet=True)[0]


@pytest.mark.docker
def test_docker_download_leaves_out_links_to_host_files(image: str,
                                                        places: tuple[Path, Path]) -> None:
    from skyhub.sandbox.docker import DockerSandbox

    dest, outside = places
    with DockerSandbox(image) as sb:  # the guest tars the agent's tree as it is
        r = sb.exec(TREE.format(secret=outside / "secret.txt", outside=outside))
        assert r.ok, r
        sb.download(".", dest)
        sb.download("result.txt", dest / "one")
    assert_contained(dest, outside)
    assert (dest / "ok").read_text() == "real\n"
    assert not os.path.lexists(dest / "one" / "result.txt")


KILL_GUEST = ("import os\nfor p in os.listdir('/proc'):\n"
              "    if p.isdigit() and int(p) not in (os.getpid(), os.getppid()):\n"
              "        try:\n            cmd = open(f'/proc/{p}/cmdline', 'rb').read()\n"
              "        except OSError:\n            continue\n"
              "        if b'skyhub/guest.pyz' in cmd:\n            os.kill(int(p), 9)\n")


# A guest the agent writes over /opt/skyhub/guest.pyz (python3 runs a script named .pyz too;
# root owns it in a root-run image): it
# answers every request, and `tar` with the chain archive.
HOSTILE_GUEST = """
import base64, json, os, struct, sys
CHAIN = base64.b64decode({chain!r})
inp, out = sys.stdin.buffer, sys.stdout.buffer
while True:
    head = inp.read(4)
    if len(head) < 4:
        break
    req = json.loads(inp.read(struct.unpack(">I", head)[0]))
    reply = {{"ok": True, "id": req.get("id"), "pid": os.getpid(), "uid": os.getuid(),
              "exit_code": 0, "stdout": "", "stderr": "", "timed_out": False,
              "duration_s": 0.0, "killed": 0, "data": base64.b64encode(CHAIN).decode()}}
    body = json.dumps(reply).encode()
    out.write(struct.pack(">I", len(body)) + body)
    out.flush()
"""


@pytest.mark.docker
def test_a_rewritten_guest_never_answers_a_download(places: tuple[Path, Path]) -> None:
    """Root image: the agent rewrites the guest's file and kills the guest. Before, the host
    restarted that file in the same container and extracted its archive with tarfile's
    filter: `../outside/pwned.txt` appeared on the host. Now the container is replaced (a
    guest never starts twice in one), and the extractor would refuse the chain anyway."""
    from skyhub.sandbox.docker import DockerSandbox

    dest, outside = places
    chain = base64.b64encode(realpath_chain("../outside", real_names=False, root="./"))
    with DockerSandbox("debian:bookworm-slim") as sb:
        assert sb.exec("id -u").stdout == "0\n"
        sb.write_file("/tmp/guest.py", HOSTILE_GUEST.format(chain=chain.decode()))
        r = sb.exec(["sh", "-c", "cp /tmp/guest.py /opt/skyhub/guest.pyz && "
                     "touch /work/marker && python3 -c \"$0\"", KILL_GUEST])
        assert r.exit_code == 137, r  # the guest running this command is gone
        sb.download(".", dest)
        assert not (outside / "pwned.txt").exists()
        assert_contained(dest, outside)
        assert sb.replaced == 1
        assert sb.exec("ls /work").stdout == ""  # a fresh container: the marker is gone
        assert b"CHAIN" not in sb.read_file("/opt/skyhub/guest.pyz")
