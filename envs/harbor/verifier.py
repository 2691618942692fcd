"""Harbor's verifier, run where the agent cannot reach its verdict.

The bundled tasks (and most Harbor tasks) run their agent as root in the container: it may
change any file of the image, write /logs/verifier, leave daemons behind. So before
`tests/test.sh` runs, `HarborEnv` (env.py) does, through Docker's API only (no program of the
container is trusted for these steps):

1. `stop`: the container is killed, so not one process of the agent's survives (its files
   stay: the writable layer is kept). Steps 2 and 3 act on the stopped container.
2. `restore_interpreters`: Docker's diff of the container against its image names every file
   the agent changed; those that run the verifier itself, the interpreters (bash, sh, dash, env,
   python3) in the usual bin directories, the dynamic loader and the C libraries they load
   (libc, libm, libtinfo, libpython...), /etc/ld.so.cache and /etc/ld.so.conf*, and those that
   start pid 1 again (`sleep`, the image's entrypoint), are put back as the image has them
   (read from a fresh, never started container of the image) and checked byte for byte; an
   added /etc/ld.so.preload is emptied, and an added bash/sh/dash/env/sleep that shadows the
   image's on the PATH (e.g. /usr/local/bin/bash) is replaced by the image's.
3. `prepare_dirs`: /tests and /logs/verifier are replaced (Docker's archive API), root-owned,
   /tests holding exactly the task's tests/ (uploaded only now) and /logs/verifier empty,
   then checked through the same API.
   Then `start`: pid 1 runs again, as in a fresh container (the image's entrypoint, if any).
4. test.sh runs as Harbor runs it (env.py): made executable, executed directly (its shebang
   decides), as `[verifier] user` in a fresh Docker exec, with `[verifier.env]`, the
   container's PATH and no BASH_ENV/ENV/PROMPT_COMMAND, its output to
   /logs/verifier/test-stdout.txt, and a deadline kept by the host (past it the container is
   killed).
5. `read_rewards`: /logs/verifier/reward.json (an object of named numbers), else reward.txt
   (Harbor's precedence), read through Docker's archive API, at most `MAX_REWARD_BYTES`,
   regular files only, parsed strictly (finite numbers only); `scalar_reward` picks the
   episode's reward from them.

The limit, honestly: an agent that is root in its container can change every other program
and file the test script uses (grep, cmp, a Python package, a data file it reads) or that the
image's entrypoint runs: step 2 protects the interpreter that runs test.sh and what starts
pid 1, not what either of them trusts. A task that must be safe against a root agent should
run its agent as a non-root user.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import posixpath
import re
import tarfile
from pathlib import Path
from typing import Any

from skyhub.errors import BadReward, InfraError, Tampered, UsageError
from skyhub.sandbox import base

REWARD_TXT, REWARD_JSON = "/logs/verifier/reward.txt", "/logs/verifier/reward.json"
MAX_REWARD_BYTES = 64 << 10
_TYPE_BITS = (1 << 31 | 1 << 27 | 1 << 26 | 1 << 25 | 1 << 24 | 1 << 21 | 1 << 19)  # Go's
_DIR_BIT, _LINK_BIT = 1 << 31, 1 << 27  # os.FileMode: dir, symlink, device, pipe, socket...

_NAMES = r"(bash|sh|dash|env|sleep|python3(\.\d+)?)"
_BIN = r"/(usr/(local/)?)?s?bin"
_LIBS = (r"(ld-linux[^/]*|ld-musl[^/]*|ld-[0-9.]+\.so|libc[.-][^/]*|libm[.-][^/]*|"
         r"libtinfo[^/]*|libdl[.-][^/]*|libpthread[.-][^/]*|libpython3[^/]*|libz\.so[^/]*|"
         r"libexpat[^/]*|libffi[^/]*|libcrypt[.-][^/]*)")
_LIB = r"/(usr/(local/)?)?lib(32|64|x32)?(/[^/]+-linux-[^/]+)?"
CRITICAL = re.compile(rf"{_BIN}/{_NAMES}|{_LIB}/{_LIBS}|/etc/ld\.so\.(cache|conf)|"
                      r"/etc/ld\.so\.conf\.d/[^/]+")
_TOP_LINKS = re.compile(r"/(bin|sbin|lib|lib32|lib64|libx32)")  # merged-/usr's symlinks
_SHADOWS = re.compile(r"/usr/local/s?bin/(bash|sh|dash|env|sleep)")
PRELOAD = "/etc/ld.so.preload"


# ----------------------------------------------------------------------------- processes
def stop(sb: Any) -> None:
    """Kill the container: every process in it is gone; its files are kept."""
    import docker.errors

    c = sb.container
    try:
        c.reload()
        if c.status in ("running", "paused", "restarting"):
            c.kill()
        c.wait(condition="not-running", timeout=60)
    except docker.errors.DockerException as e:
        raise InfraError(f"cannot stop sandbox container {c.name} for the verifier: "
                         f"{e}") from e


def start(sb: Any) -> None:
    """Start the stopped container again (pid 1 as for a new one). Tampered when it does not
    stay up (its entrypoint is the image's, run from files the agent may have changed)."""
    c = sb.container
    c.start()
    c.reload()
    if c.status != "running":
        raise Tampered(f"the container did not start again ({c.status}, exit code "
                       f"{c.attrs.get('State', {}).get('ExitCode')})")


# ------------------------------------------------------------------------ interpreters
def restore_interpreters(sb: Any, also: tuple[str, ...] = ()) -> list[str]:
    """Put back, as the image has them, the files that run the verifier (and the paths in
    `also`: the image's entrypoint) that the agent changed, deleted or shadowed (see the
    module docstring); return their paths. Tampered when one cannot be restored."""
    import docker.errors

    try:
        changes = sb.container.diff() or []
    except docker.errors.DockerException as e:
        raise InfraError(f"Docker cannot diff sandbox container {sb.container.name}: {e}") from e
    todo = []
    for ch in changes:
        path, kind = str(ch.get("Path", "")), int(ch.get("Kind", -1))
        if kind in (0, 2) and (CRITICAL.fullmatch(path) or _TOP_LINKS.fullmatch(path) or
                               path in also):
            todo.append((path, path))                 # changed or deleted: the image's copy
        elif kind == 1 and _SHADOWS.fullmatch(path):
            todo.append((path, "/usr/bin/" + posixpath.basename(path)))  # a shadow: likewise
        elif kind in (0, 1) and path == PRELOAD:
            todo.append((path, None))                 # preloads nothing
    if not todo:
        return []
    pristine = sb.client.containers.create(sb.image, ["true"], network_mode="none",
                                           labels=base.owner_labels("harbor-pristine"))
    restored = []
    try:
        for path, source in sorted(todo, key=lambda t: t[0].count("/")):
            want = _put_pristine(sb, pristine, path, source)
            if want is None:
                continue  # the image has no such file: the agent installed it; left alone
            if _member(sb.client.api, sb.container.id, path) != want:
                raise Tampered(f"{path} could not be restored from the image")
            restored.append(path)
    except docker.errors.DockerException as e:
        raise Tampered(f"restoring the image's interpreters failed: {e}") from e
    finally:
        with contextlib.suppress(Exception):
            pristine.remove(force=True)
    return restored


def _put_pristine(sb: Any, pristine: Any, path: str, source: str | None) -> tuple | None:
    """Copy `source` of the image to `path` in the sandbox (None: an empty file); return the
    member `path` must now be, or None when the image has nothing to copy."""
    name = posixpath.basename(path)
    if source is None:
        info = tarfile.TarInfo(name)
        data = b""
    else:
        got = _member(sb.client.api, pristine.id, source, keep_data=True)
        if got is None or (_TOP_LINKS.fullmatch(path) and got[0] != tarfile.SYMTYPE):
            return None  # missing in the image, or a real top-level directory (not merged-/usr)
        kind, link, mode, data = got
        mode &= 0o7777
        if kind == tarfile.SYMTYPE and source != path and not link.startswith("/"):
            link = posixpath.normpath(posixpath.join(posixpath.dirname(source), link))
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.mode = kind, link, mode
    info.size, info.uid, info.gid, info.mode = len(data), 0, 0, info.mode & 0o7777
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    sb.container.put_archive(posixpath.dirname(path) or "/", buf.getvalue())
    return (info.type, info.linkname, info.mode, data)


def _member(api: Any, cid: str, path: str, keep_data: bool = True,
            limit: int = 256 << 20) -> tuple | None:
    """(type, link target, mode, bytes) of one file or link of a container (None: absent),
    through Docker's archive API."""
    with archive(api, cid, path) as (stat, tar):
        if tar is None:
            return None
        if stat["mode"] & _DIR_BIT:
            return ("dir", "", 0, b"")
        for m in tar:
            if m.name.rstrip("/") != posixpath.basename(path):
                continue
            if m.isreg() and m.size > limit:
                raise Tampered(f"{path} is {m.size} bytes")
            f = tar.extractfile(m) if m.isreg() else None
            return (m.type, m.linkname, m.mode & 0o7777, f.read() if f and keep_data else b"")
    return None


@contextlib.contextmanager
def archive(api: Any, cid: str, path: str) -> Any:
    """Docker's tar of `path` in a container, streamed: yields (stat, tarfile in stream mode)
    or (None, None) when the path does not exist. The stat (size, mode, link target) comes
    before any byte of the content, so nothing big is read unless asked for."""
    import docker.errors
    import docker.utils

    res = api.get(api._url("/containers/{0}/archive", cid), params={"path": path},
                  stream=True, headers={"Accept-Encoding": "identity"}, timeout=120)
    try:
        if res.status_code == 404:
            yield None, None
            return
        try:
            res.raise_for_status()
        except Exception as e:
            raise docker.errors.APIError(str(e), response=res) from e
        stat = docker.utils.decode_json_header(res.headers["X-Docker-Container-Path-Stat"])
        with tarfile.open(fileobj=res.raw, mode="r|") as tar:
            yield stat, tar
    finally:
        res.close()


# ---------------------------------------------------------------- /tests, /logs/verifier
def tests_tar(tests: Path | list[Path]) -> tuple[bytes, set[str]]:
    """One tar for put_archive at "/" that replaces /tests and /logs/verifier, whatever they
    are (Docker's extraction removes a directory, link or file that a member of another kind
    replaces: an empty file goes first, then the directory), with the task's tests/ (several
    directories are merged in order, later files winning, as Harbor uploads a step's tests over
    the task's) and an empty directory that every user may write (Harbor's is a 0777 bind
    mount; the verifier may run as a non-root user), root-owned; and the member names /tests
    must then hold."""
    sources = [tests] if isinstance(tests, Path) else list(tests)
    buf, names = io.BytesIO(), set()

    def root_owned(i: tarfile.TarInfo) -> tarfile.TarInfo:
        i.uid = i.gid = 0
        i.uname = i.gname = ""
        names.add(i.name)
        return i

    def entry(name: str, kind: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode = kind, 0o755 if kind == tarfile.DIRTYPE else 0o644
        if name == "logs/verifier" and kind == tarfile.DIRTYPE:
            info.mode = 0o777
        tar.addfile(info, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)

    with tarfile.open(fileobj=buf, mode="w") as tar:
        entry("tests", tarfile.REGTYPE)
        entry("logs", tarfile.DIRTYPE)
        entry("logs/verifier", tarfile.REGTYPE)
        entry("logs/verifier", tarfile.DIRTYPE)
        if not sources:
            entry("tests", tarfile.DIRTYPE)
            names.add("tests")
        for src in sources:
            tar.add(src, arcname="tests", filter=root_owned)
    return buf.getvalue(), names


def prepare_dirs(sb: Any, tests: Path | list[Path]) -> None:
    """/tests holding exactly the task's tests and an empty root-owned /logs/verifier, made
    right before the verifier through Docker's API (whatever the agent left there is gone).
    Tampered if they are not so afterwards."""
    data, names = tests_tar(tests)
    sb.container.put_archive("/", data)
    api, cid = sb.client.api, sb.container.id
    with archive(api, cid, "/logs/verifier") as (stat, tar):
        members = [] if tar is None else [(m.name, m.type, m.uid) for m in tar]
    if stat is None or not stat["mode"] & _DIR_BIT or stat.get("linkTarget") or \
            members != [("verifier", tarfile.DIRTYPE, 0)]:
        raise Tampered(f"/logs/verifier is not an empty root-owned directory: {members[:5]}")
    with archive(api, cid, "/tests") as (stat, tar):
        got = set() if tar is None else {m.name.rstrip("/") for m in tar}
    if got != names:
        raise Tampered(f"/tests does not hold exactly the task's tests: "
                       f"{sorted(got ^ names)[:5]}")


# -------------------------------------------------------------------------- the reward
def read_rewards(sb: Any) -> dict[str, float]:
    """The named rewards the verifier left: reward.json (any JSON object of named numbers),
    else reward.txt (one number, named `reward`), as Harbor reads them. BadReward if none."""
    doc = _read_small(sb, REWARD_JSON)
    if doc is not None:
        return _parse_json(doc)
    text = _read_small(sb, REWARD_TXT)
    if text is None:
        raise BadReward(f"tests/test.sh left no reward in {REWARD_JSON} or {REWARD_TXT}")
    return {"reward": _parse_txt(text)}


def scalar_reward(rewards: dict[str, float], reward_key: str | None, task_id: str) -> float:
    """The one number an RL trainer needs: `reward_key`'s value when the user named one, else
    `reward` when present, else the only value. Several named rewards and no `reward`: the
    user must say which (a UsageError), since any rule skyhub picked would be a guess."""
    if reward_key is not None:
        if reward_key not in rewards:
            raise BadReward(f"the verifier's rewards have no {reward_key!r} (reward_key=); "
                            f"they are {sorted(rewards)}")
        return rewards[reward_key]
    if "reward" in rewards:
        return rewards["reward"]
    if len(rewards) == 1:
        return next(iter(rewards.values()))
    raise UsageError(f"Harbor task {task_id}'s verifier wrote several named rewards "
                     f"{sorted(rewards)} and no 'reward'; pass reward_key= one of them to "
                     "make('harbor', ...) to say which one is the episode's reward")


def read_small(sb: Any, path: str, limit: int = MAX_REWARD_BYTES) -> bytes | None:
    """A regular file's bytes, at most `limit` of them (a longer file: its last `limit`
    bytes are not read, BadReward); None when it does not exist."""
    return _read_small(sb, path, limit)


def _read_small(sb: Any, path: str, limit: int = MAX_REWARD_BYTES) -> bytes | None:
    """A regular file's bytes, at most `limit` (None: it does not exist)."""
    with archive(sb.client.api, sb.container.id, path) as (stat, tar):
        if tar is None:
            return None
        if stat["mode"] & _TYPE_BITS or stat.get("linkTarget"):
            raise BadReward(f"{path} is not a regular file")
        if stat["size"] > limit:
            raise BadReward(f"{path} is {stat['size']} bytes (at most {limit} are read)")
        for m in tar:
            if m.isreg() and m.name == posixpath.basename(path) and m.size <= limit:
                f = tar.extractfile(m)
                return f.read() if f else b""
    raise BadReward(f"{path} could not be read")


_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


def _parse_txt(raw: bytes) -> float:
    try:
        text = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise BadReward(f"{REWARD_TXT} is not text") from None
    if not _NUMBER.fullmatch(text) or not math.isfinite(value := float(text)):
        raise BadReward(f"{REWARD_TXT} does not hold one number: {text[:80]!r}")
    return value


def _parse_json(raw: bytes) -> dict[str, float]:
    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a number")

    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=no_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise BadReward(f"{REWARD_JSON} is not JSON ({e})") from None

    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)

    if not isinstance(doc, dict) or not doc:
        raise BadReward(f"{REWARD_JSON} is not a JSON object of named rewards")
    bad = sorted(str(k) for k, v in doc.items() if not number(v))
    if bad:
        raise BadReward(f"{REWARD_JSON}: {', '.join(bad[:5])} "
                        f"{'is not a number' if len(bad) == 1 else 'are not numbers'}")
    return {str(k): float(v) for k, v in doc.items()}


__all__ = ["MAX_REWARD_BYTES", "REWARD_JSON", "REWARD_TXT", "BadReward", "Tampered",
           "prepare_dirs", "read_rewards", "read_small", "restore_interpreters",
           "scalar_reward", "start", "stop", "tests_tar"]
