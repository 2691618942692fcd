"""The same behaviours on every backend that runs here (docker, local): what env authors may
rely on whichever `backend=` a user picks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from skyhub.errors import UsageError
from skyhub.sandbox import Sandbox, create
from skyhub.sandbox.guest.procs import TRUNCATION_MARKER


@pytest.fixture(params=["local", "docker"])
def sb(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    if request.param == "docker":
        request.getfixturevalue("docker_daemon")
        from skyhub.sandbox import images

        images.build(quiet=True)
    else:
        request.getfixturevalue("bwrap")
    with create(backend=request.param, memory_mb=512, max_output=4096) as box:
        yield box


def test_exec_reports_exit_codes_output_and_timeouts(sb: Sandbox) -> None:
    r = sb.exec("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (3, "out\n", "err\n", False)
    assert sb.exec(["printf", "%s|", "a b", "c"]).stdout == "a b|c|"
    assert sb.exec("cat", stdin="piped").stdout == "piped"
    assert sb.exec("echo $X", env={"X": "42"}).stdout == "42\n"
    r = sb.exec("sleep 100", timeout=1)
    assert r.timed_out and not r.ok and r.exit_code == 137


def test_output_is_capped_with_a_marker(sb: Sandbox) -> None:
    r = sb.exec("head -c 1000000 /dev/zero | tr '\\0' x")
    marker = TRUNCATION_MARKER.format(n=1000000 - 4096)
    assert marker in r.stdout
    assert len(r.stdout) == 4096 + len(marker)


def test_files_and_directories_move_the_same_way(sb: Sandbox, tmp_path: Path) -> None:
    src = tmp_path / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "m.py").write_text("X = 1\n")
    (src / "top.txt").write_text("top\n")
    sb.upload(src, "dest")                         # a directory's contents go into dest
    assert sb.exec("cat dest/pkg/m.py dest/top.txt").stdout == "X = 1\ntop\n"
    sb.upload(src / "top.txt", "single")           # a file goes to dest/<its name>
    assert sb.read_file("single/top.txt") == b"top\n"
    sb.download("dest", tmp_path / "back")          # and back, the same way
    assert (tmp_path / "back" / "pkg" / "m.py").read_text() == "X = 1\n"
    sb.download("single/top.txt", tmp_path / "one")
    assert (tmp_path / "one" / "top.txt").read_text() == "top\n"
    sb.write_file("bin/blob", bytes(range(256)))
    assert sb.read_file(f"{sb.workdir}/bin/blob") == bytes(range(256))
    with pytest.raises(FileNotFoundError):
        sb.read_file("missing")


def test_restore_gives_back_the_snapshot(sb: Sandbox) -> None:
    sb.exec("mkdir -p a && echo 1 > a/one && echo keep > k")
    snap = sb.snapshot()
    sb.exec("rm -rf a && echo changed > k && touch new")
    sb.restore(snap)
    assert sb.exec("ls -A | sort && cat a/one k").stdout == "a\nk\n1\nkeep\n"
    with create(backend=sb.backend, memory_mb=256) as other, pytest.raises(UsageError):
        other.restore(snap)                        # a snapshot belongs to its sandbox
