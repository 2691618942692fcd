"""Harbor's verifier, in one of two places (HarborEnv's `isolation=`).

`isolation="harbor"` (benchmarking, eval's default) is Harbor's shared verifier: tests/test.sh
runs in the agent's own container, the agent's processes still alive (a server it started is
there for the tests, as Harbor leaves it). Before it, through Docker's API only, `prepare_dirs`
replaces /tests with exactly the task's tests/ and empties /logs/verifier. Nothing more: a root
agent can forge this verdict exactly as it can in Harbor's shared mode (docs/sandboxes.md,
"Harbor's two faces": an NSS module, a replaced binary, a daemon writing the reward file).

`isolation="training"` computes the verdict where nothing the agent wrote can run: a FRESH
container of the task's image as built (its programs, libraries, /etc, interpreters: all the
image's), into which `copy_data` puts the agent's results as data, at the same paths:
- only under the data roots: the task's workdir, /logs/agent, /logs/artifacts, the task's
  declared artifacts and the user's `verifier_paths=`; never "/" nor a system tree (/etc,
  /usr, /bin, /sbin, /lib*, /opt, /var, /boot, /dev, /proc, /sys, /run), so no binary,
  library, NSS module, loader or shell config the agent wrote is where a program looks for one;
- a root is copied only when Docker's diff says the agent changed something under it; the
  verifier's copy is removed first (the agent's deletions hold), then the agent's tree is put
  in through a filtered archive: regular files, directories, hard links to earlier members
  and symbolic links only; no member below a link of the archive (a link cannot carry a later
  member outside its root), no setuid/setgid bit, no device or fifo, at most `MAX_DATA_BYTES`;
  dot-entries directly under a home directory (~/.local's Python user site, ~/.bashrc...) are
  left out.
What test.sh itself chooses to run or import of that data (a script in the workdir it
executes, a module found through the workdir) is the agent's code by the task's design; such
a task should run its verifier as a non-root `[verifier] user`.

`read_rewards`: /logs/verifier/reward.json (an object of named numbers), else reward.txt
(Harbor's precedence), read through Docker's archive API, at most `MAX_REWARD_BYTES`, regular
files only, parsed strictly (finite numbers only); rewards.py picks the episode's reward.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import posixpath
import re
import tarfile
import time
from pathlib import Path
from typing import Any

from skyhub.envs.harbor.errors import BadReward, Tampered
from skyhub.errors import InfraError

REWARD_TXT, REWARD_JSON = "/logs/verifier/reward.txt", "/logs/verifier/reward.json"
MAX_REWARD_BYTES = 64 << 10
_TYPE_BITS = (1 << 31 | 1 << 27 | 1 << 26 | 1 << 25 | 1 << 24 | 1 << 21 | 1 << 19)  # Go's
_DIR_BIT, _LINK_BIT = 1 << 31, 1 << 27  # os.FileMode: dir, symlink, device, pipe, socket...



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


def prepare_dirs(sb: Any, tests: Path | list[Path], *, check: bool = True) -> None:
    """/tests holding exactly the task's tests and an empty root-owned /logs/verifier, made
    right before the verifier through Docker's API (whatever the agent left there is gone).
    Tampered if they are not so afterwards (`check`; not in the agent's live container,
    where its processes may write there at any time, as in Harbor)."""
    data, names = tests_tar(tests)
    sb.container.put_archive("/", data)
    if not check:
        return
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


# ------------------------------------------------------- the agent's results, as data
MAX_DATA_BYTES = 2 << 30
#: trees where programs look for programs, libraries and their configuration
SYSTEM_TREES = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
                "/var", "/boot", "/dev", "/proc", "/sys", "/run", "/tests", "/solution",
                "/logs/verifier")
_HOME = re.compile(r"/root|/home/[^/]+")


def data_root_problem(path: str) -> str | None:
    """Why `path` cannot be a data root of the training verifier (None: it can)."""
    norm = posixpath.normpath("/" + path.lstrip("/")) if path else "/"
    if not path.startswith("/"):
        return f"{path!r} is not an absolute path"
    if norm == "/":
        return "'/' is the whole filesystem, programs included"
    for top in SYSTEM_TREES:
        if norm == top or norm.startswith(top + "/"):
            return f"{norm} is in {top}, where programs, libraries or their configuration live"
    return None


#: How often a pause is tried before its failure stands (`freeze`).
FREEZE_TRIES = 5


def freeze(container: Any) -> None:
    """Pause `container` (its processes frozen, so nothing changes what is then copied).
    runc gives up when the container's cgroup does not reach FROZEN within its short wait
    ("unable to freeze"), which a loaded machine sees now and then with processes forking;
    that is tried again, a moment later, up to `FREEZE_TRIES` times. Any other error, or
    the last try's, is raised (docker's APIError)."""
    import docker.errors

    for attempt in range(1, FREEZE_TRIES + 1):
        try:
            container.pause()
            return
        except docker.errors.APIError as e:
            if "unable to freeze" not in str(e) or attempt == FREEZE_TRIES:
                raise
            time.sleep(0.2 * attempt)


def changed_roots(changes: list[dict[str, Any]], roots: list[str]) -> list[str]:
    """The roots under which Docker's diff of the agent's container names a change."""
    paths = [str(ch.get("Path", "")) for ch in changes]
    return [r for r in roots if any(p == r or p.startswith(r.rstrip("/") + "/") for p in paths)]


def copy_data(src: Any, dest: Any, root: str, *, budget: list[int]) -> str:
    """Put the agent's tree `root` (of container `src`) at `root` in the verifier's container
    `dest`, as data (module docstring): the verifier's copy removed first, the agent's
    filtered. Returns what happened ("copied", "deleted"). Tampered when the agent's data
    cannot be carried (over `MAX_DATA_BYTES` in all: `budget` holds what is left)."""
    with archive(src.client.api, src.container.id, root) as (_stat, tar):
        return _put_filtered(dest, root, tar, budget)


def save_data(src: Any, root: str, path: Path, *, budget: list[int]) -> bool:
    """Write the agent's tree `root` (of container `src`) to the host file `path` as the
    filtered tar `copy_data` would put in the verifier's container (nothing is extracted on
    the host). False when `root` does not exist. Tampered when over `budget`."""
    with archive(src.client.api, src.container.id, root) as (_stat, tar):
        if tar is None:
            return False
        with path.open("wb") as out, tarfile.open(fileobj=out, mode="w") as new:
            _filter_tree(tar, new, root, budget)
    return True


def restore_data(dest: Any, root: str, path: Path | None, *, budget: list[int]) -> str:
    """Put a tree saved by `save_data` (None: the root did not exist) back at `root` in
    container `dest`, filtered again (a saved file is data someone may have edited)."""
    if path is None:
        return _put_filtered(dest, root, None, budget)
    with path.open("rb") as f, tarfile.open(fileobj=f, mode="r|") as tar:
        return _put_filtered(dest, root, tar, budget)


def _put_filtered(dest: Any, root: str, tar: tarfile.TarFile | None, budget: list[int]) -> str:
    """`root` in `dest` removed, then `tar`'s tree (None: nothing) put there, filtered."""
    import tempfile

    from skyhub.shell import judge

    r = judge.docker_exec(dest, ["rm", "-rf", "--", root], user="0", timeout=300,
                          on_timeout=lambda: None)
    if r.exit_code != 0:
        raise InfraError(f"cannot clear {root} in the verifier's container: "
                         f"{(r.stderr or r.stdout)[-300:]}")
    if tar is None:
        return "deleted"
    with tempfile.SpooledTemporaryFile(64 << 20) as out:
        with tarfile.open(fileobj=out, mode="w") as new:
            _filter_tree(tar, new, root, budget)
        out.seek(0)
        dest.container.put_archive(posixpath.dirname(root) or "/", out)
    return "copied"


def _filter_tree(tar: tarfile.TarFile, new: tarfile.TarFile, root: str,
                 budget: list[int]) -> None:
    """`tar`'s members of the tree `root` (named from its last part) added to `new` as data
    (module docstring): no member outside it or below one of its links, no setuid/setgid,
    no device or fifo, no dot-entry of a home, at most `budget[0]` bytes (Tampered)."""
    top = posixpath.basename(root)
    home = bool(_HOME.fullmatch(root))
    links: set[str] = set()
    regular: set[str] = set()
    for m in tar:
        name = posixpath.normpath(m.name)
        parts = name.split("/")
        if name.startswith("/") or ".." in parts or parts[0] != top:
            continue
        if home and len(parts) >= 2 and parts[1].startswith("."):
            continue  # a shell's or Python's start-up files of the home
        if any("/".join(parts[:i]) in links for i in range(1, len(parts))):
            continue  # below a link: it would land where the link points
        m.name = name
        m.mode &= 0o1777  # no setuid, no setgid
        if m.isreg():
            budget[0] -= m.size
            if budget[0] < 0:
                raise Tampered(f"the agent's data under {root} is over the size that is "
                               f"carried (at most {MAX_DATA_BYTES >> 20} MiB to the verifier, "
                               "less to a saved final state)")
            new.addfile(m, tar.extractfile(m))
            regular.add(name)
        elif m.isdir():
            new.addfile(m)
        elif m.issym():
            links.add(name)
            new.addfile(m)
        elif m.islnk() and posixpath.normpath(m.linkname) in regular:
            m.linkname = posixpath.normpath(m.linkname)
            new.addfile(m)


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


__all__ = ["MAX_DATA_BYTES", "MAX_REWARD_BYTES", "REWARD_JSON", "REWARD_TXT", "SYSTEM_TREES",
           "BadReward", "Tampered", "changed_roots", "copy_data", "data_root_problem",
           "prepare_dirs", "read_rewards", "read_small", "restore_data", "save_data",
           "tests_tar"]
