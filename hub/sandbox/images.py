"""skyhub's sandbox images: the Dockerfiles, their tags, and how to build them.

The core's images live in `images/<name>/`; a family keeps its own image in its room and
declares it with a `skyhub.images` entry point, `name = "<package>:<directory>"` (a directory
inside the package, found without importing the package), e.g. the Python family's `python`
image (pyproject.toml). The first comment line of its Dockerfile describes it.

A tag's version is a short hash of the image directory's files and of `guest.pyz` (the zipapp
of the guest package, `guest_app`), so any edit to a Dockerfile or to any module of the guest
(the in-sandbox daemon the image embeds) yields a new tag: a stale image is never used by
mistake, and `build()` only builds what is missing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import tempfile
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from skyhub.errors import SandboxUnavailable, UsageError
from skyhub.sandbox import guest_app

IMAGES_DIR = Path(__file__).parent / "images"
BASE_IMAGE = "debian:bookworm-slim"
ENTRY_POINT_GROUP = "skyhub.images"
LABEL_IMAGE = "skyhub.image"


def _family_images() -> dict[str, Path]:
    """name -> directory of the images that families declare (see the module docstring)."""
    found = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            spec = importlib.util.find_spec(ep.module)
        except (ImportError, ValueError):  # a package that is gone: no image of it
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        found[ep.name] = Path(next(iter(spec.submodule_search_locations))) / (ep.attr or "image")
    return found


def _describe(directory: Path) -> str:
    """The first comment line of the image's Dockerfile."""
    for line in (directory / "Dockerfile").read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


#: the core's images, each in `IMAGES_DIR/<name>/`: name -> what it is for
CORE_IMAGES: dict[str, str] = {
    "default": "python3, bash, coreutils, procps, git; user `sandbox`; workdir /work",
}
#: the families' images: name -> the directory that holds its Dockerfile
IMAGE_DIRS: dict[str, Path] = {n: d for n, d in _family_images().items() if n not in CORE_IMAGES}
#: every image: name -> what it is for
IMAGES: dict[str, str] = {**CORE_IMAGES, **{n: _describe(d) for n, d in IMAGE_DIRS.items()}}


def _image_dir(name: str) -> Path:
    if name in CORE_IMAGES:
        return IMAGES_DIR / name
    if name not in IMAGE_DIRS:
        raise UsageError(f"unknown skyhub image {name!r}; known: {sorted(IMAGES)}")
    return IMAGE_DIRS[name]


def _context_files(name: str) -> list[tuple[str, bytes]]:
    """(name in the build context, contents) for every file the image is built from: the
    image directory's files and the guest's zipapp."""
    root = _image_dir(name)
    files = [(p.relative_to(root).as_posix(), p.read_bytes())
             for p in sorted(root.rglob("*")) if p.is_file()]
    return [*files, (guest_app.APP_NAME, guest_app.zipapp())]


def image_version(name: str = "default") -> str:
    """A 12-hex-digit hash of what goes into the image (file names and contents)."""
    h = hashlib.sha256()
    for rel, data in _context_files(name):
        h.update(rel.encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:12]


def image_tag(name: str = "default") -> str:
    """The tag of skyhub's image `name`, e.g. `skyhub/default:3f2a9c0b1d7e`."""
    return f"skyhub/{name}:{image_version(name)}"


def _has_image(client: Any, ref: str) -> bool:
    import docker.errors

    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def build(names: list[str] | None = None, *, quiet: bool = False,
          client: Any = None) -> list[str]:
    """Build the images in `names` (default: all) that are not built yet; return their tags.

    The context is a temporary directory with the image directory's files and `guest.pyz`,
    so Dockerfiles can `COPY guest.pyz`. Docker Hub may be unreachable: the base image must be
    present locally (`bash scripts/services.sh` seeds it).
    """
    from skyhub.sandbox.docker_client import get_client

    client = client or get_client()
    say = (lambda _msg: None) if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    tags = []
    for name in names or list(IMAGES):
        tag = image_tag(name)
        tags.append(tag)
        if _has_image(client, tag):
            say(f"[images] {tag} is up to date")
            continue
        if not _has_image(client, BASE_IMAGE):
            raise SandboxUnavailable(
                f"cannot build {tag}: the base image {BASE_IMAGE} is missing and Docker Hub may be"
                " unreachable; `bash scripts/services.sh` seeds it locally (debootstrap)")
        say(f"[images] building {tag} ({IMAGES[name]})")
        _build_one(client, name, tag, say)
        say(f"[images] built {tag}")
    return tags


def _build_one(client: Any, name: str, tag: str, say: Any) -> None:
    with tempfile.TemporaryDirectory(prefix="skyhub-image-") as ctx:
        for rel, data in _context_files(name):
            dest = Path(ctx) / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        log: list[str] = []
        stream = client.api.build(path=ctx, tag=tag, rm=True, forcerm=True, pull=False,
                                  decode=True, labels={LABEL_IMAGE: name})
        for chunk in stream:
            if "error" in chunk:
                tail = "".join(log[-20:])
                raise SandboxUnavailable(
                    f"building {tag} failed: {chunk['error'].strip()}\n{tail}\n"
                    f"(Dockerfile: {_image_dir(name) / 'Dockerfile'}; apt inside the build needs"
                    " Debian's mirror)")
            line = chunk.get("stream") or chunk.get("status") or ""
            if line.strip():
                log.append(line if line.endswith("\n") else line + "\n")
                if line.startswith("Step "):
                    say(f"[images]   {line.strip()}")
    if not _has_image(client, tag):
        raise SandboxUnavailable(f"building {tag} reported success but the image is missing")


__all__ = ["BASE_IMAGE", "IMAGES", "IMAGE_DIRS", "build", "image_tag", "image_version", "is_built"]


def is_built(tag: str, client: Any = None) -> bool:
    """Whether the image `tag` exists in the local Docker daemon."""
    from skyhub.sandbox.docker_client import get_client

    return _has_image(client or get_client(), tag)
