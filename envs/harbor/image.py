"""A Harbor task's Docker image, built as Harbor builds it, and what its container runs with.

Harbor builds with `docker compose build` (BuildKit) from the task's `environment/` directory,
or from the build context and Dockerfile its `docker-compose.yaml` names (compose.py reads that
file). skyhub builds the same thing with BuildKit through the docker CLI and caches it under
`skyhub-harbor/<task>:<12 hex digits>`: the hash covers everything the build reads (the whole
build context, the Dockerfile, the compose file, build args and target), so a task is built
once per content, by any process on the daemon, and an edit anywhere in its context rebuilds.

Builds never pull. The base image must be present locally (`bash scripts/services.sh` seeds
debian:bookworm-slim): BuildKit, with the daemon's own builder, reads `FROM` images from the
daemon's store without asking a registry. A `# syntax=` line names a Dockerfile frontend image
that BuildKit would fetch from Docker Hub; when that image is not present locally the line is
neutralised and the daemon's built-in frontend is used (newer syntax, such as heredocs, then
fails with a hint in the message).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyhub.errors import SandboxUnavailable

from .compose import BuildSpec, MainService, compose_variables, read_main_service

LABEL = "skyhub.harbor"
#: Bumped when the way images are built changes, so images of the old way are not reused
#: (v2: BuildKit and compose files; v1 used docker-py's legacy builder).
BUILD_VERSION = b"skyhub-harbor-build-v2"
# Harbor leaves these out of its environment hash (environments/definition.py)
_HASH_IGNORE = frozenset({".git", "__pycache__", ".DS_Store"})
_SYNTAX = re.compile(r"^#\s*syntax\s*=\s*(\S+)\s*$", re.IGNORECASE)
_LOG_NOISE = re.compile(r"^#\d+ sha256:[0-9a-f]+$")
# BuildKit's summary of a failed step: " > [internal] load metadata for docker.io/library/x:1:"
_METADATA_ERROR = re.compile(r"> \[internal\] load metadata for (\S+):")

_locks: dict[str, threading.Lock] = {}
_digests: dict[tuple[Any, ...], str] = {}  # a stat fingerprint -> its content hash
_locks_guard = threading.Lock()


@dataclass(frozen=True)
class ImageSpec:
    """The image a task runs in and the compose file's settings for its container.

    command None: keep skyhub's keep-alive (Harbor's `sh -c "sleep infinity"`); entrypoint
    None: the image's ENTRYPOINT. environment is the compose file's only: Harbor layers the
    task's `[environment] env` over it, which the runtime applies. volumes are docker-py binds
    ("host:container:mode", host paths absolute)."""

    tag: str
    command: list[str] | None = None
    entrypoint: list[str] | None = None
    environment: dict[str, str] = field(default_factory=dict)
    volumes: list[str] = field(default_factory=list)
    working_dir: str | None = None
    user: str | None = None


@dataclass(frozen=True)
class _Plan:
    task: str
    repo: str
    service: MainService
    digest: str | None  # None: a prebuilt docker_image

    @property
    def tag(self) -> str:
        return f"{self.repo}:{self.digest}"


# ------------------------------------------------------------------------------- planning
def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.") or "task"


def _split_cfg(cfg: Mapping[str, Any], build_timeout_s: float | None
               ) -> tuple[Mapping[str, Any], float]:
    """An env config dict, or a whole task config (its `environment` and `build_timeout_s`),
    or skyhub's older flat config: all three are accepted."""
    env_cfg = cfg.get("environment") if isinstance(cfg.get("environment"), Mapping) else cfg
    timeout = build_timeout_s if build_timeout_s is not None else (
        cfg.get("build_timeout_s") or env_cfg.get("build_timeout_s") or 600.0)
    return env_cfg, float(timeout)  # type: ignore[return-value]


def _plan(task_dir: Path, env_cfg: Mapping[str, Any]) -> _Plan:
    build_dir = Path(env_cfg.get("build_dir") or task_dir / "environment")
    task = task_dir.name
    slug = _slug(task)
    if build_dir.name != "environment":  # a separate verifier environment (tests/), a step's
        slug = f"{slug}-{_slug(build_dir.name)}"
    repo = f"skyhub-harbor/{slug}"
    prebuilt = bool(env_cfg.get("docker_image"))
    variables = compose_variables(build_dir, env_cfg, main_image_name=repo)
    service = read_main_service(build_dir, variables, prebuilt=prebuilt)
    digest = None if service.build is None else _digest(service)
    return _Plan(task=task, repo=repo, service=service, digest=digest)


def _tree(root: Path) -> list[tuple[str, Path, os.stat_result]]:
    """Every file under `root` (symlinks not followed: BuildKit sends them as links), sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _HASH_IGNORE)
        for name in sorted(filenames):
            if name not in _HASH_IGNORE:
                p = Path(dirpath) / name
                out.append((p.relative_to(root).as_posix(), p, p.lstat()))
    return out


def _digest(service: MainService) -> str:
    """12 hex digits of names, modes, sizes and contents of the context's files, the
    Dockerfile, the compose file, target and build args. Resets call this every episode, so
    a content hash is reused while no file's size, mode, mtime or ctime has changed (and not
    memoised while a file is under 2 s old: timestamps are coarser than writes, as git knows)."""
    b = service.build
    assert b is not None
    files = _tree(b.context)
    extra = [p for p in (b.dockerfile, service.compose_file) if p is not None]
    key = (str(b.context), b.dockerfile_inline, b.target, tuple(sorted(b.args.items())),
           tuple((rel, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                 for rel, _, st in files),
           tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in extra))
    recent = time.time_ns() - 2_000_000_000
    settled = all(max(st.st_mtime_ns, st.st_ctime_ns) < recent for _, _, st in files) and \
        all(p.stat().st_mtime_ns < recent for p in extra)
    if key in _digests:
        return _digests[key]
    h = hashlib.sha256(BUILD_VERSION + b"\0")
    for rel, p, st in files:
        h.update(rel.encode() + b"\0" + f"{stat.S_IMODE(st.st_mode):o} {st.st_size}\0".encode())
        if stat.S_ISLNK(st.st_mode):
            h.update(os.readlink(p).encode())
        elif stat.S_ISREG(st.st_mode):
            h.update(p.read_bytes())
        h.update(b"\0")
    # the Dockerfile and compose file may sit outside the context
    for label, path in (("dockerfile", b.dockerfile), ("compose", service.compose_file)):
        if path is not None:
            h.update(f"{label}\0{path.name}\0".encode() + path.read_bytes() + b"\0")
    if b.dockerfile is not None:
        with contextlib.suppress(ValueError):
            h.update(b"at\0" + b.dockerfile.relative_to(b.context).as_posix().encode())
    h.update(f"inline\0{b.dockerfile_inline}\0target\0{b.target}\0".encode())
    for k, v in sorted(b.args.items()):
        h.update(f"arg\0{k}={v}\0".encode())
    digest = h.hexdigest()[:12]
    if settled:
        if len(_digests) > 1024:
            _digests.clear()
        _digests[key] = digest
    return digest


def image_tag(task_dir: str | Path, env_cfg: Mapping[str, Any] | None = None) -> str:
    """The tag `task_image` builds for the task (nothing is built): `skyhub-harbor/<task>:<hash>`
    (or the task's docker_image)."""
    env_cfg = _split_cfg(env_cfg or {}, None)[0]
    plan = _plan(Path(task_dir), env_cfg)
    return plan.tag if plan.digest else str(env_cfg["docker_image"])


# ------------------------------------------------------------------------------- building
def _cli_version(cli: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version (\d+)\.(\d+)", out.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else None


@functools.cache
def buildkit_cli() -> tuple[str, ...]:
    """The command that builds with BuildKit, found at run time: `$SKYHUB_DOCKER_CLI`, then
    each docker CLI on the machine. A CLI from 18.09 to 22.x builds with BuildKit itself
    (DOCKER_BUILDKIT=1); from 23 on, `docker build` needs the buildx plugin."""
    seen: set[str] = set()
    tried: list[str] = []
    for cand in (os.environ.get("SKYHUB_DOCKER_CLI"), shutil.which("docker"), "/usr/bin/docker",
                 "/usr/local/bin/docker", "/bin/docker"):
        if not cand or not os.access(cand, os.X_OK):
            continue
        real = os.path.realpath(cand)
        if real in seen:
            continue
        seen.add(real)
        version = _cli_version(cand)
        if version is None:
            tried.append(f"{cand} (does not answer --version)")
            continue
        if (18, 9) <= version < (23, 0):
            return (cand, "build")
        try:
            ok = subprocess.run([cand, "buildx", "version"], capture_output=True,
                                timeout=15).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return (cand, "buildx", "build", "--load")
        tried.append(f"{cand} ({version[0]}.{version[1]}, without the buildx plugin)")
    raise SandboxUnavailable(
        "building Harbor task images needs a docker CLI that builds with BuildKit, and none "
        f"was found (tried: {', '.join(tried) or 'no docker CLI on PATH'}). Install the buildx "
        "plugin (Docker's docker-buildx-plugin package, Debian's docker-buildx), or point "
        "SKYHUB_DOCKER_CLI at a docker CLI older than 23 (these build with BuildKit themselves)")


def _image_present(client: Any, ref: str) -> bool:
    import docker.errors

    try:
        client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.DockerException as e:
        raise SandboxUnavailable(f"the Docker daemon did not answer about image {ref}: {e}"
                                 ) from e


def _cache_dir() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    d = root / "skyhub" / "harbor-builds"
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def _build_lock(tag: str) -> Iterator[None]:
    """One build per tag: a thread lock for this process, a file lock for the others."""
    with _locks_guard:
        lock = _locks.setdefault(tag, threading.Lock())
    name = tag.replace("/", "+").replace(":", "-")
    with lock, open(_cache_dir() / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _dockerfile_for_build(b: BuildSpec, client: Any, scratch: Path) -> tuple[Path, str | None]:
    """The Dockerfile to hand BuildKit, and the `# syntax=` frontend that was neutralised (a
    copy in `scratch` with that line blanked, the original's `.dockerignore` beside it) when
    the frontend image is not present locally: BuildKit would fetch it from a registry."""
    text = b.dockerfile_inline if b.dockerfile_inline is not None else \
        b.dockerfile.read_text(errors="replace")  # type: ignore[union-attr]
    lines = text.splitlines(keepends=True)
    frontend = None
    for i, line in enumerate(lines):  # parser directives come first, before any instruction
        if not line.strip().startswith("#"):
            break
        m = _SYNTAX.match(line.strip())
        if m:
            if not _image_present(client, m.group(1)):
                frontend = m.group(1)
                lines[i] = "#\n"  # keep the line numbers of the build log
            break
    if b.dockerfile is not None and frontend is None:
        return b.dockerfile, None
    name = b.dockerfile.name if b.dockerfile is not None else "Dockerfile"
    out = scratch / name
    out.write_text("".join(lines))
    if b.dockerfile is not None:
        ignore = b.dockerfile.with_name(name + ".dockerignore")
        if ignore.is_file():
            shutil.copy(ignore, scratch / ignore.name)
    return out, frontend


def _log_tail(path: Path, n: int = 15) -> str:
    lines = [ln for ln in path.read_text(errors="replace").splitlines()
             if ln.strip() and not _LOG_NOISE.match(ln.strip())]
    return "\n".join(lines[-n:])


def _missing_base(log_path: Path) -> str | None:
    """The FROM image BuildKit went to a registry for and did not get, if that is the error."""
    text = log_path.read_text(errors="replace")
    m = _METADATA_ERROR.search(text)
    return m.group(1).removeprefix("docker.io/library/").removeprefix("docker.io/") if m else None


def _build(plan: _Plan, client: Any, timeout_s: float) -> None:
    b = plan.service.build
    assert b is not None
    cli = buildkit_cli()
    log_path = _cache_dir() / f"{plan.tag.replace('/', '+').replace(':', '-')}.log"
    env = {**os.environ, "DOCKER_BUILDKIT": "1", "BUILDKIT_PROGRESS": "plain"}
    with tempfile.TemporaryDirectory(prefix="skyhub-harbor-df-") as scratch:
        dockerfile, frontend = _dockerfile_for_build(b, client, Path(scratch))
        cmd = [*cli, "--progress=plain", "--tag", plan.tag, "--label", f"{LABEL}={plan.task}",
               "--file", str(dockerfile)]
        cmd += [f"--build-arg={k}={v}" for k, v in b.args.items()]
        if b.target:
            cmd += ["--target", b.target]
        cmd.append(str(b.context))
        with open(log_path, "wb") as logf:
            logf.write(("$ " + " ".join(cmd) + "\n").encode())
            logf.flush()
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf,
                                        stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
            except OSError as e:
                raise SandboxUnavailable(f"could not run {cli[0]} to build Harbor task "
                                         f"{plan.task}: {e}") from e
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # the CLI we started; the daemon stops
                proc.wait()
                raise SandboxUnavailable(
                    f"building Harbor task {plan.task} timed out after {timeout_s:g} s "
                    f"([environment] build_timeout_sec); log: {log_path}\n"
                    f"{_log_tail(log_path)}") from None
    if rc != 0:
        hint = ("base images must be present locally (Docker Hub may be unreachable: "
                "`docker pull` or `docker tag` a stand-in)")
        missing = _missing_base(log_path)
        if missing:
            hint = (f"the base image {missing} is not present locally and no registry answered: "
                    f"`docker pull {missing}`, or `docker tag` a local stand-in as {missing}")
        if frontend:
            hint += (f"; the Dockerfile's `# syntax={frontend}` frontend is not present "
                     "locally, so the daemon's built-in one was used: newer syntax needs "
                     f"`docker pull {frontend}`")
        raise SandboxUnavailable(f"building Harbor task {plan.task} failed (exit {rc}); log: "
                                 f"{log_path}\n{_log_tail(log_path)}\n({hint})")
    if not _image_present(client, plan.tag):
        raise SandboxUnavailable(f"building Harbor task {plan.task} succeeded but {plan.tag} "
                                 f"is not in the daemon's images; log: {log_path}")


def task_image(task_dir: str | Path, env_cfg: Mapping[str, Any], client: Any = None, *,
               build_timeout_s: float | None = None) -> ImageSpec:
    """The image to run the task in, built now if missing, and its container settings.

    `env_cfg`: the task's env config (task.meta["config"]["environment"], or a separate
    verifier environment's); a whole task config is accepted too. A `docker_image` task's image
    must be present locally (never pulled). SandboxUnavailable says why there is no image
    (with the build log's tail); UsageError, what in the task skyhub cannot run."""
    from skyhub.sandbox.docker_client import get_client

    task_dir = Path(task_dir)
    env_cfg, timeout_s = _split_cfg(env_cfg, build_timeout_s)
    plan = _plan(task_dir, env_cfg)
    client = client or get_client()
    svc = plan.service
    if plan.digest is None:
        tag = str(env_cfg["docker_image"])
        if not _image_present(client, tag):
            raise SandboxUnavailable(f"the task's docker_image {tag} is not present; pull it "
                                     f"first (`docker pull {tag}`)")
    else:
        tag = plan.tag
        if not _image_present(client, tag):
            with _build_lock(tag):
                if not _image_present(client, tag):  # another thread or process built it
                    _build(plan, client, timeout_s)
    return ImageSpec(tag=tag, command=svc.command, entrypoint=svc.entrypoint,
                     environment=dict(svc.environment), volumes=list(svc.volumes),
                     working_dir=svc.working_dir, user=svc.user)


__all__ = ["BUILD_VERSION", "LABEL", "ImageSpec", "buildkit_cli", "image_tag", "task_image"]
