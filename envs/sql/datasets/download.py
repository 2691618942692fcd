"""The downloadable datasets: where each official release lives, what it must hash to, and how
it unpacks under the data root (`$SKYHUB_DATA`, or `--root`).

Nothing here runs unless asked (`skyhub sql data get NAME`, or `get(...)`); the loaders never
download. `get` fetches each file of a release into `<root>/.downloads/`, checks its SHA-256
*before* anything is unpacked, unpacks into a staging folder next to the destination and then
moves the finished entries into `<root>/<dest>/` by renames on one filesystem, so a failed or
interrupted run never leaves half-written files in a dataset folder.

Checksum policy. A release's `sha256` is pinned only where a published value could be checked
against more than one independent public source; no file was downloaded to compute one (this
code was written without access to the releases). Everything else has `sha256=None`, and then
`get` does not trust the bytes silently: it downloads, prints the computed SHA-256 and refuses
to unpack until the user accepts it with `verify=False` (`--no-verify`) or names the expected
value (`--sha256`). The refused file stays in `.downloads/`, so accepting it downloads nothing
again. A pinned checksum that does not match deletes the file and raises `ChecksumMismatch`
(nothing is unpacked) unless verification is turned off, which then only warns.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from skyhub.envs.sql.errors import UnverifiedDownload
from skyhub.errors import ChecksumMismatch, DownloadError, UsageError

_CHUNK = 1 << 20
_JUNK = ("__MACOSX",)  # macOS resource forks that some releases zip up


@dataclass(frozen=True)
class Artifact:
    """One file of a release. `subdir` is the folder inside the archive whose contents become
    the dataset folder (None: the archive's single top-level folder, if it has exactly one);
    `nested` are archives inside it to unpack in place (BIRD ships its databases zipped)."""

    url: str
    sha256: str | None = None
    kind: str = "zip"  # "zip", "tar" or "file" (copied as is)
    subdir: str | None = None
    nested: tuple[str, ...] = ()
    filename: str = ""

    @property
    def name(self) -> str:
        return self.filename or PurePosixPath(self.url.split("?")[0]).name


@dataclass(frozen=True)
class Source:
    """A downloadable dataset: its files, the folder it fills under the data root, and the
    entries a complete copy has there (`layout`, folders end with '/')."""

    name: str
    dest: str
    artifacts: tuple[Artifact, ...]
    layout: tuple[str, ...]
    homepage: str
    license: str
    note: str = ""


_OMNISQL_ZIP = "https://huggingface.co/datasets/seeklhy/OmniSQL-datasets/resolve/main/data.zip"
_SKYRL653 = "https://huggingface.co/datasets/NovaSky-AI/SkyRL-SQL-653-data-newfmt/resolve/main"
_SKYRL_EVAL = "https://huggingface.co/datasets/NovaSky-AI/SkyRL-SQL-eval/resolve/main"
_REALISTIC = "https://zenodo.org/api/records/5205322/files/{}/content"
_DK_COMMIT = "5e16fa1f8cdbb401f3b55d2afb5a7c7435360590"  # ygan/Spider-DK main, 2021-10-20
_SYN_COMMIT = "0b996a57b7e329c14c300a8fb13661da128a9ddc"  # ygan/Spider-Syn main, 2021-10-23

SOURCES: dict[str, Source] = {s.name: s for s in (
    Source("spider", "spider", (Artifact(
        "https://drive.usercontent.google.com/download?id=1403EGqzIDoHMdQF4c9Bkyl7dZLZ5Wt6J"
        "&export=download&confirm=t", filename="spider_data.zip", subdir="spider_data"),),
        ("dev.json", "train_spider.json", "tables.json", "database/"),
        "https://yale-lily.github.io/spider", "CC BY-SA 4.0",
        "the Google Drive file linked from the Spider site (spider_data.zip, 2024 release)"),
    Source("spider-dk", "spider-dk", (Artifact(
        f"https://github.com/ygan/Spider-DK/archive/{_DK_COMMIT}.zip",
        filename=f"Spider-DK-{_DK_COMMIT[:7]}.zip"),),
        ("Spider-DK.json", "tables.json", "database/"),
        "https://github.com/ygan/Spider-DK", "MIT",
        "ships only its 3 modified databases; the others are Spider's (get 'spider' too)"),
    Source("spider-syn", "spider-syn", (Artifact(
        f"https://github.com/ygan/Spider-Syn/archive/{_SYN_COMMIT}.zip",
        filename=f"Spider-Syn-{_SYN_COMMIT[:7]}.zip",
        subdir=f"Spider-Syn-{_SYN_COMMIT}/Spider-Syn"),),
        ("dev.json", "train_spider.json"), "https://github.com/ygan/Spider-Syn", "MIT",
        "questions only; the databases are Spider's (get 'spider' too)"),
    Source("spider-realistic", "spider-realistic", tuple(
        Artifact(_REALISTIC.format(f), kind="file", filename=f)
        for f in ("spider-realistic.json", "tables.json", "dev.json", "README.txt", "license")),
        ("spider-realistic.json", "tables.json"), "https://zenodo.org/records/5205322",
        "see the record's license file", "questions only; the databases are Spider's"),
    Source("bird", "bird", (Artifact(
        "https://bird-bench.oss-cn-beijing.aliyuncs.com/dev.zip",
        # Published for the 2024-06-27 dev.zip by two independent public projects; not
        # recomputed here. BIRD re-releases dev now and then: a mismatch says so.
        sha256="cdd6d19faeb45a23970b98d3ef6c40a87987c95459c2cf12076897a60cf5a630",
        nested=("dev_databases.zip",)),),
        ("dev.json", "dev_tables.json", "dev_databases/"), "https://bird-bench.github.io/",
        "CC BY-SA 4.0", "the dev split (1,534 questions, 11 databases)"),
    Source("bird-train", "bird", (Artifact(
        "https://bird-bench.oss-cn-beijing.aliyuncs.com/train.zip",
        nested=("train_databases.zip",)),),
        ("train.json", "train_tables.json", "train_databases/"),
        "https://bird-bench.github.io/", "CC BY-SA 4.0", "the train split (about 33 GB)"),
    Source("synsql", "synsql", (Artifact(
        _OMNISQL_ZIP, filename="OmniSQL-data.zip", subdir="data/SynSQL-2.5M"),),
        ("data.json", "tables.json", "databases/"),
        "https://github.com/RUCKBReasoning/OmniSQL", "Apache-2.0",
        "from OmniSQL's data.zip (22 GB); only data/SynSQL-2.5M/ is unpacked"),
    Source("skyrl653", "skyrl653", tuple(
        Artifact(f"{_SKYRL653}/{f}", kind="file") for f in ("train.parquet", "validation.parquet")),
        ("train.parquet", "validation.parquet"),
        "https://huggingface.co/datasets/NovaSky-AI/SkyRL-SQL-653-data-newfmt",
        "see the dataset card", "prompts only; needs 'synsql' and 'spider' for the databases"),
    # The files OmniSQL's evaluate_skysql/infer_multiturn_all.sh (SkyRL-SQL's evaluation)
    # reads: the schema text OmniSQL built per question; the Spider loader uses them.
    Source("skyrl-sql-eval", "skyrl-sql-eval", tuple(
        Artifact(f"{_SKYRL_EVAL}/{f}", kind="file") for f in (
            "dev_spider.json", "test_spider.json", "dev_spider_dk.json",
            "dev_spider_realistic.json", "dev_spider_syn.json")),
        ("dev_spider.json", "test_spider.json", "dev_spider_dk.json",
         "dev_spider_realistic.json", "dev_spider_syn.json"),
        "https://huggingface.co/datasets/NovaSky-AI/SkyRL-SQL-eval", "see the dataset card",
        "SkyRL-SQL's evaluation prompts (schema text per question); the questions' databases "
        "and gold come from the Spider releases"),
)}


def data_root(root: str | Path | None = None) -> Path:
    """`root`, else `$SKYHUB_DATA`; a `UsageError` if neither is set (the loaders look in
    `$SKYHUB_DATA/<dataset>`, so a download anywhere else would not be found)."""
    if root is None:
        root = os.environ.get("SKYHUB_DATA")
        if not root:
            raise UsageError("no data root: pass --root DIR (root=...) or set SKYHUB_DATA; the "
                             "loaders look for datasets in $SKYHUB_DATA/<name>")
    return Path(root).expanduser()


def source(name: str) -> Source:
    try:
        return SOURCES[name]
    except KeyError:
        raise UsageError(f"unknown dataset {name!r}; downloadable: "
                         f"{', '.join(sorted(SOURCES))}") from None


def missing(src: Source, root: str | Path) -> list[str]:
    """The entries of `src.layout` that are not under `<root>/<dest>/`."""
    base = Path(root) / src.dest
    return [e for e in src.layout
            if not ((base / e.rstrip("/")).is_dir() if e.endswith("/") else (base / e).is_file())]


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def get(name: str, root: str | Path | None = None, *, url: str | None = None,
        sha256: str | None = None, verify: bool = True, force: bool = False,
        keep_archive: bool = False, console: Any = None) -> Path:
    """Download, verify and unpack dataset `name` into `<root>/<dest>/`; returns that folder.

    `url` replaces the official address (a mirror, or a local file downloaded by hand) and
    `sha256` the expected checksum; both only for single-file releases. Entries that already
    exist in the destination are an error unless `force` (then they are replaced). The
    downloads are deleted after a successful unpack unless `keep_archive`.
    """
    from rich.console import Console

    console = console or Console(stderr=True, highlight=False)
    src, root = source(name), data_root(root)
    artifacts = list(src.artifacts)
    if (url or sha256) and len(artifacts) != 1:
        raise UsageError(f"{name} has {len(artifacts)} files; --url and --sha256 only apply to "
                         "single-file datasets")
    if url:
        artifacts[0] = replace(artifacts[0], url=_as_url(url))
    if sha256:
        artifacts[0] = replace(artifacts[0], sha256=sha256.lower())
    downloads = root / ".downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    files = [downloads / a.name for a in artifacts]
    unverified = []
    for art, path in zip(artifacts, files, strict=True):
        if url or not path.is_file():  # an earlier (refused) download is reused
            _download(art, path, src, console)
        digest = sha256_of(path)
        if art.sha256 and digest != art.sha256:
            if verify:
                path.unlink()
                raise ChecksumMismatch(
                    f"{art.name} from {art.url} has sha256 {digest}, expected {art.sha256}. "
                    "Nothing was unpacked and the file was deleted. A broken download or mirror, "
                    f"or a new upstream release ({src.homepage}), causes this; rerun to retry, "
                    "or pass --no-verify to accept the file anyway")
            console.print(f"[yellow]warning: {art.name} has sha256 {digest}, not the pinned "
                          f"{art.sha256}; unpacking it because verification is off[/]")
        elif not art.sha256:
            if verify:
                unverified.append(f"  {path}  sha256 {digest}")
            else:
                console.print(f"{art.name}: sha256 {digest} (no pinned checksum; accepted)")
    if unverified:
        raise UnverifiedDownload(
            f"{name} has no pinned checksum, so nothing was unpacked. Downloaded:\n"
            + "\n".join(unverified) + "\nCompare with the publisher's value where there is one "
            f"({src.homepage}), then rerun with --no-verify to accept"
            + (" (or --sha256 HEX)" if len(artifacts) == 1 else "")
            + f"; the files stay in {downloads}, so a rerun without --url downloads nothing")
    dest = _install(src, artifacts, files, root, force, console)
    if not keep_archive:
        for path in files:
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            downloads.rmdir()  # only if empty
    left = missing(src, root)
    if left:
        console.print(f"[yellow]warning: {dest} lacks {', '.join(left)} after unpacking; the "
                      f"release layout may have changed (see {src.homepage})[/]")
    return dest


# ------------------------------------------------------------------ downloading
def _as_url(url: str) -> str:
    """A local path becomes a file:// URL, so a hand-downloaded archive can be passed."""
    p = Path(url).expanduser()
    return p.resolve().as_uri() if "://" not in url and p.exists() else url


def _download(art: Artifact, path: Path, src: Source, console: Any) -> None:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    part = path.with_name(path.name + ".part")
    request = urllib.request.Request(art.url, headers={"User-Agent": "skyhub-data"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            ctype = response.headers.get("Content-Type", "") or ""
            if art.kind != "file" and ctype.startswith("text/html"):
                raise DownloadError(
                    f"{art.url} answered with a web page, not the {art.kind} archive (Google "
                    "Drive does this when it wants a confirmation click). Download it in a "
                    f"browser from {src.homepage} and pass --url /path/to/{art.name}")
            total = int(response.headers.get("Content-Length") or 0) or None
            columns = (TextColumn(art.name), BarColumn(), DownloadColumn(),
                       TransferSpeedColumn(), TimeRemainingColumn())
            with Progress(*columns, console=console, transient=True) as bar, \
                    part.open("wb") as out:
                task = bar.add_task("download", total=total)
                for block in iter(lambda: response.read(_CHUNK), b""):
                    out.write(block)
                    bar.advance(task, len(block))
    except (urllib.error.URLError, OSError) as e:
        part.unlink(missing_ok=True)
        raise DownloadError(f"could not download {art.url}: {e}. Check the network, or download "
                            f"it by hand from {src.homepage} and pass --url PATH") from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, path)


# ------------------------------------------------------------------ unpacking
def _install(src: Source, artifacts: list[Artifact], files: list[Path], root: Path,
             force: bool, console: Any) -> Path:
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{src.name}-", dir=root))
    try:
        out = staging / "out"
        out.mkdir()
        for i, (art, path) in enumerate(zip(artifacts, files, strict=True)):
            if art.kind == "file":
                shutil.copy2(path, out / art.name)
                continue
            raw = staging / f"raw{i}"
            console.print(f"unpacking {path.name} ...")
            _unpack(art, path, raw)
            top = _select(art, raw)
            for nested in art.nested:
                if (top / nested).is_file():
                    _unpack_nested(top / nested)
            for entry in top.iterdir():
                if entry.name in _JUNK:
                    continue
                if (out / entry.name).exists():
                    raise DownloadError(f"{entry.name} appears twice in the {src.name} release")
                os.replace(entry, out / entry.name)
        for junk in _JUNK:
            for p in list(out.rglob(junk)):
                shutil.rmtree(p, ignore_errors=True)
        dest = root / src.dest
        dest.mkdir(parents=True, exist_ok=True)
        clash = sorted(e.name for e in out.iterdir() if (dest / e.name).exists())
        if clash and not force:
            raise UsageError(f"{dest} already has {', '.join(clash)}; pass --force to replace "
                             "them (nothing was changed)")
        for entry in sorted(out.iterdir()):
            target = dest / entry.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            os.replace(entry, target)
        return dest
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _unpack(art: Artifact, path: Path, into: Path) -> None:
    prefix = f"{art.subdir.strip('/')}/" if art.subdir else ""
    kind = art.kind
    if kind == "zip" and not zipfile.is_zipfile(path) and tarfile.is_tarfile(path):
        kind = "tar"
    try:
        if kind == "zip":
            _unzip(path, into, prefix)
        elif kind == "tar":
            with tarfile.open(path) as tf:
                members = [m for m in tf.getmembers() if m.name.startswith(prefix)]
                if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: refuses unsafe members
                    tf.extractall(into, members=members, filter="data")
                else:
                    for m in members:
                        if m.name.startswith("/") or ".." in PurePosixPath(m.name).parts \
                                or m.issym() or m.islnk():
                            raise DownloadError(f"{path.name} has an unsafe member {m.name!r}")
                    tf.extractall(into, members=members)
        else:
            raise DownloadError(f"unknown archive kind {kind!r} for {path.name}")
    except (zipfile.BadZipFile, tarfile.TarError) as e:
        raise DownloadError(f"{path} is not a readable {kind} archive ({e}); delete it and "
                            "rerun to download it again") from None


def _unzip(path: Path, into: Path, prefix: str = "") -> None:
    """Extract the members under `prefix` (all of them by default), refusing any member whose
    path would land outside `into` (absolute, or with '..')."""
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if n.startswith(prefix)]
        for n in names:
            parts = PurePosixPath(n.replace("\\", "/")).parts
            if n.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
                raise DownloadError(f"{path.name} has an unsafe member {n!r}; refusing to unpack")
        into.mkdir(parents=True, exist_ok=True)
        zf.extractall(into, members=names)


def _unpack_nested(inner: Path) -> None:
    """Unzip `X.zip` into the folder `X/` beside it, whether the zip holds `X/...` or the
    contents of X directly, then delete the zip."""
    target = inner.with_suffix("")
    if not target.exists():
        tmp = inner.with_name(f".{target.name}.unzipping")
        _unzip(inner, tmp)
        entries = [e for e in tmp.iterdir() if e.name not in _JUNK]
        single = len(entries) == 1 and entries[0].is_dir() and entries[0].name == target.name
        os.replace(entries[0] if single else tmp, target)
        shutil.rmtree(tmp, ignore_errors=True)
    inner.unlink()


def _select(art: Artifact, raw: Path) -> Path:
    if art.subdir:
        top = raw / art.subdir
        if not top.is_dir():
            raise DownloadError(f"the archive from {art.url} has no folder {art.subdir}/; the "
                                "release layout changed, please report it")
        return top
    if not raw.exists():
        return raw
    entries = [e for e in raw.iterdir() if e.name not in _JUNK]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else raw


