"""`skyhub sql data get` and `skyhub sql data ls` against a real HTTP server on 127.0.0.1
serving small archives: a verified download is unpacked, anything unverified or wrong is
refused before a single file lands in the dataset folder."""

from __future__ import annotations

import hashlib
import http.server
import io
import re
import threading
import zipfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from skyhub.cli.main import app
from skyhub.envs.sql.datasets import download
from skyhub.envs.sql.datasets.download import Artifact, Source

runner = CliRunner()
WIDE = {"COLUMNS": "250"}
REPO = Path(__file__).resolve().parents[3]


def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, ["sql", "data", *args], env={**WIDE, **(env or {})})


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


# A release as BIRD ships it: one top-level folder, the databases as a zip inside, and macOS junk.
INNER = zip_bytes({"tiny_databases/shop/shop.sqlite": b"SQLite format 3\x00 (not really)"})
RELEASE = zip_bytes({"tiny_20240627/dev.json": b'[{"db_id": "shop"}]',
                     "tiny_20240627/tiny_databases.zip": INNER,
                     "__MACOSX/tiny_20240627/._dev.json": b"junk"})
EVIL = zip_bytes({"ok.json": b"{}", "../escaped.txt": b"gotcha"})


class Server:
    """Serves `files` (name -> bytes) and counts the requests per path."""

    def __init__(self, root: Path) -> None:
        self.root, self.hits = root, {}  # type: ignore[var-annotated]
        hits = self.hits

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                hits[self.path] = hits.get(self.path, 0) + 1
                super().do_GET()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), partial(Handler, directory=str(root)))
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,),
                                       daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    files = tmp_path / "served"
    files.mkdir()
    (files / "tiny.zip").write_bytes(RELEASE)
    (files / "evil.zip").write_bytes(EVIL)
    (files / "page.html").write_text("<html>confirm download</html>")
    s = Server(files)
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


@pytest.fixture
def register(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Registers a test dataset `tiny` (gone after the test)."""
    def reg(url: str, sha256: str | None, **kw: Any) -> Source:
        src = Source("tiny", "tiny", (Artifact(url, sha256=sha256, nested=("tiny_databases.zip",),
                                               **kw),),
                     ("dev.json", "tiny_databases/"), "https://example.org/tiny", "CC0")
        monkeypatch.setitem(download.SOURCES, "tiny", src)
        return src
    return reg


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".staging"))


@pytest.mark.parametrize("inner_prefix", ["tiny_databases/", ""])
def test_verified_download_is_unpacked_with_nested_databases(
        server: Server, register: Any, tmp_path: Path, inner_prefix: str) -> None:
    inner = zip_bytes({f"{inner_prefix}shop/shop.sqlite": b"SQLite format 3"})
    release = zip_bytes({"tiny_20240627/dev.json": b'[{"db_id": "shop"}]',
                         "tiny_20240627/tiny_databases.zip": inner,
                         "__MACOSX/tiny_20240627/._dev.json": b"junk"})
    (server.root / "tiny.zip").write_bytes(release)
    register(server.url("tiny.zip"), hashlib.sha256(release).hexdigest())
    root = tmp_path / "data"
    result = invoke("get", "tiny", "--root", str(root))
    assert result.exit_code == 0, result.output
    assert (root / "tiny" / "dev.json").read_text() == '[{"db_id": "shop"}]'
    assert (root / "tiny" / "tiny_databases" / "shop" / "shop.sqlite").is_file()
    assert not (root / "tiny" / "tiny_databases.zip").exists()
    assert not list((root / "tiny").rglob("__MACOSX")) and not leftovers(root)
    assert not (root / ".downloads").exists()  # the archive is removed once unpacked
    assert f"tiny is ready in {root / 'tiny'}" in result.output


def test_wrong_checksum_is_refused_and_nothing_is_unpacked(server: Server, register: Any,
                                                           tmp_path: Path) -> None:
    register(server.url("tiny.zip"), "0" * 64)
    root = tmp_path / "data"
    result = invoke("get", "tiny", "--root", str(root))
    assert result.exit_code == 2
    assert hashlib.sha256(RELEASE).hexdigest() in result.output and "0" * 64 in result.output
    assert "Nothing was unpacked" in result.output
    assert not (root / "tiny").exists() and not leftovers(root)
    assert not (root / ".downloads" / "tiny.zip").exists()


def test_unpinned_release_needs_no_verify_and_is_not_downloaded_twice(
        server: Server, register: Any, tmp_path: Path) -> None:
    register(server.url("tiny.zip"), None)
    root = tmp_path / "data"
    refused = invoke("get", "tiny", "--root", str(root))
    assert refused.exit_code == 2 and not (root / "tiny").exists()
    assert hashlib.sha256(RELEASE).hexdigest() in refused.output
    assert "--no-verify" in refused.output and "--sha256" in refused.output
    accepted = invoke("get", "tiny", "--root", str(root), "--no-verify")
    assert accepted.exit_code == 0, accepted.output
    assert (root / "tiny" / "dev.json").is_file()
    assert server.hits == {"/tiny.zip": 1}


def test_sha256_option_verifies_an_unpinned_release(server: Server, register: Any,
                                                    tmp_path: Path) -> None:
    register(server.url("tiny.zip"), None)
    root = tmp_path / "data"
    bad = invoke("get", "tiny", "--root", str(root), "--sha256", "f" * 64)
    assert bad.exit_code == 2 and not (root / "tiny").exists()
    good = invoke("get", "tiny", "--root", str(root), "--sha256",
                  hashlib.sha256(RELEASE).hexdigest().upper())
    assert good.exit_code == 0, good.output
    assert (root / "tiny" / "dev.json").is_file()


def test_existing_files_are_kept_unless_forced(server: Server, register: Any,
                                               tmp_path: Path) -> None:
    register(server.url("tiny.zip"), hashlib.sha256(RELEASE).hexdigest())
    root = tmp_path / "data"
    (root / "tiny").mkdir(parents=True)
    (root / "tiny" / "dev.json").write_text("mine")
    clash = invoke("get", "tiny", "--root", str(root))
    assert clash.exit_code == 2 and "--force" in clash.output
    assert (root / "tiny" / "dev.json").read_text() == "mine" and not leftovers(root)
    forced = invoke("get", "tiny", "--root", str(root), "--force")
    assert forced.exit_code == 0, forced.output
    assert (root / "tiny" / "dev.json").read_text() != "mine"


def test_archive_escaping_its_folder_is_refused(server: Server, register: Any,
                                                tmp_path: Path) -> None:
    register(server.url("evil.zip"), None)
    root = tmp_path / "data"
    result = invoke("get", "tiny", "--root", str(root), "--no-verify")
    assert result.exit_code == 2 and "unsafe member" in result.output
    assert not (tmp_path / "escaped.txt").exists() and not (root / "escaped.txt").exists()
    assert not (root / "tiny").exists() and not leftovers(root)


def test_a_web_page_instead_of_the_archive_is_explained(server: Server, register: Any,
                                                        tmp_path: Path) -> None:
    register(server.url("page.html"), None)
    result = invoke("get", "tiny", "--root", str(tmp_path / "data"), "--no-verify")
    assert result.exit_code == 2 and "web page" in result.output and "--url" in result.output


def test_url_can_be_a_file_downloaded_by_hand(register: Any, tmp_path: Path) -> None:
    register("https://unreachable.invalid/tiny.zip", hashlib.sha256(RELEASE).hexdigest())
    local = tmp_path / "Downloads" / "tiny.zip"
    local.parent.mkdir()
    local.write_bytes(RELEASE)
    result = invoke("get", "tiny", "--root", str(tmp_path / "data"), "--url", str(local))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "data" / "tiny" / "dev.json").is_file() and local.is_file()


def test_get_without_a_data_root_says_how_to_give_one(register: Any) -> None:
    register("http://127.0.0.1:9/tiny.zip", None)
    result = invoke("get", "tiny", env={"SKYHUB_DATA": ""})
    assert result.exit_code == 2 and "--root" in result.output and "SKYHUB_DATA" in result.output
    unknown = invoke("get", "nope", "--root", "/tmp")
    assert unknown.exit_code == 2 and "spider" in unknown.output and "bird" in unknown.output


def test_ls_shows_present_partial_and_missing_datasets(tmp_path: Path) -> None:
    root = tmp_path / "data"
    for entry in ("dev.json", "train_spider.json", "tables.json"):
        (root / "spider" / "database").mkdir(parents=True, exist_ok=True)
        (root / "spider" / entry).write_text("[]")
    (root / "bird").mkdir()
    (root / "bird" / "dev.json").write_text("[]")
    result = invoke("ls", env={"SKYHUB_DATA": str(root)})
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines()
            if line.count("│") > 4}
    assert "present" in rows["spider"] and "missing" in rows["synsql"]
    assert re.search(r"partial \(no dev_tables\.json, dev_databases/\)", rows["bird"])
    assert "data.json, tables.json, databases/" in rows["synsql"]
    unset = invoke("ls", env={"SKYHUB_DATA": ""})
    assert unset.exit_code == 0 and "not set" in unset.output and "skyrl653" in unset.output


def test_every_download_hint_in_the_loaders_names_a_real_dataset() -> None:
    hints = set()
    for py in (REPO / "envs" / "sql").rglob("*.py"):
        text = py.read_text(encoding="utf-8")
        hints |= set(re.findall(r"skyhub sql data get ([a-z0-9][a-z0-9-]*)", text))
    assert hints and hints <= set(download.SOURCES), hints - set(download.SOURCES)
    for src in download.SOURCES.values():
        assert src.layout and all(a.url.startswith("https://") for a in src.artifacts)
        assert all(a.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", a.sha256)
                   for a in src.artifacts)
