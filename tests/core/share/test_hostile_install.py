"""`skyhub install NAME --from HUB` against a hostile package source.

The attack is dependency confusion: the user's pip is configured, as many are, with another
source (an `extra-index-url` or `find-links` in pip.conf or in `PIP_*` variables), and that
source serves the same project name at a higher version whose import runs the attacker's
code. Before the fix pip merged both sources and took 9.9 from the attacker; the install
then imported it (registering its envs) and the canary was written.

Everything runs for real: wheels built here, a directory hub written by `publish_to_dir`, a
PEP 503 index served over HTTP on loopback, pip installing into a throwaway virtualenv that
sees this checkout's packages through a `.pth` file (nothing is installed into the test's
own environment).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import http.server
import json
import os
import subprocess
import sys
import sysconfig
import threading
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyhub.share.install import pip_install_command
from skyhub.share.publish import publish_to_dir, write_index

pytestmark = pytest.mark.hostile

DIST = "skyhub-canary-env"
MODULE = "skyhub_canary_env"
GOOD = ("import skyhub\n"
        "skyhub.register('canary-env', 'skyhub_canary_env:Env', override=True)\n")
#: the attacker's module: it writes the canary as soon as it is imported
EVIL = ("import os, pathlib\n"
        "pathlib.Path(os.environ['SKYHUB_TEST_CANARY']).write_text('imported the look-alike')\n"
        + GOOD)


def make_wheel(out: Path, version: str, body: str, requires: str = "") -> Path:
    """A minimal, valid pure-Python wheel of DIST with a `skyhub.envs` entry point."""
    out.mkdir(parents=True, exist_ok=True)
    info = f"{MODULE}-{version}.dist-info"
    files = {f"{MODULE}/__init__.py": body,
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {version}\n"
                                 + (f"Requires-Dist: {requires}\n" if requires else ""),
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n",
             f"{info}/entry_points.txt": f"[skyhub.envs]\ncanary-env = {MODULE}\n"}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    path = out / f"{MODULE}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, Path]:
    """The user's hub (DIST 0.1) and the attacker's source (DIST 9.9, a find-links folder
    that also holds a PEP 503 `simple/` index)."""
    hub = tmp_path / "hub"
    publish_to_dir([make_wheel(tmp_path / "build-good", "0.1", GOOD)], hub)
    evil = tmp_path / "evil"
    make_wheel(evil, "9.9", EVIL)
    write_index(evil)
    return {"hub": hub, "evil": evil}


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A virtualenv to install into, that imports this checkout's packages (skyhub, pip)
    from the test's environment through a `.pth` file. Returns its python."""
    root = tmp_path / "venv"
    venv.create(root, with_pip=False)
    site = next((root / "lib").glob("python3*/site-packages"))
    parent = sysconfig.get_paths()["purelib"]
    (site / "_parent.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    return root / "bin" / "python"


@contextlib.contextmanager
def http_index(root: Path) -> Iterator[str]:
    """`root` served over HTTP on loopback; yields the URL of its `simple/` index."""
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def hostile_pip_setup(kind: str, evil: Path, tmp_path: Path) -> dict[str, str]:
    """The environment of a user whose pip also reads the attacker's source, set the way
    users set it: `PIP_*` variables, a user pip.conf, or a `PIP_CONFIG_FILE`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["SKYHUB_TEST_CANARY"] = str(tmp_path / "canary")
    conf = (f"[global]\nextra-index-url = file://{evil}/simple\nfind-links = {evil}\n"
            "disable-pip-version-check = true\n")
    if kind == "env":
        env["PIP_EXTRA_INDEX_URL"] = f"file://{evil}/simple"
        env["PIP_FIND_LINKS"] = str(evil)
    elif kind == "user-config":
        (tmp_path / "xdg" / "pip").mkdir(parents=True)
        (tmp_path / "xdg" / "pip" / "pip.conf").write_text(conf)
        env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    else:
        (tmp_path / "pip.conf").write_text(conf)
        env["PIP_CONFIG_FILE"] = str(tmp_path / "pip.conf")
    return env


def run_install(python: Path, spec: str, source: str, env: dict[str, str]) -> dict[str, str]:
    """`skyhub.share.install.install` in the target virtualenv: what it returned or
    raised, and the version of DIST installed there afterwards."""
    code = (
        "import importlib.metadata, json, sys\n"
        "from skyhub.share.install import install\n"
        "out = {}\n"
        "try:\n"
        f"    r = install({spec!r}, {source!r})\n"
        "    out.update(version=r.version, env_ids=r.env_ids)\n"
        "except Exception as e:\n"
        "    out.update(error=type(e).__name__, message=str(e))\n"
        "try:\n"
        f"    out['installed'] = importlib.metadata.version({DIST!r})\n"
        "except importlib.metadata.PackageNotFoundError:\n"
        "    out['installed'] = None\n"
        "print(json.dumps(out))\n")
    r = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env,
                       timeout=300, cwd=python.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["env", "user-config", "config-file"])
def test_install_from_a_directory_hub_reads_only_the_hub(kind: str, sources: dict[str, Path],
                                                          target: Path,
                                                          tmp_path: Path) -> None:
    env = hostile_pip_setup(kind, sources["evil"], tmp_path)
    # the trap is live: plain pip with this configuration picks the attacker's 9.9
    trap = subprocess.run([str(target), "-m", "pip", "install", "--dry-run", "--quiet",
                           "--report", "-", "--find-links", str(sources["hub"]), DIST],
                          capture_output=True, text=True, env=env, timeout=300)
    assert trap.returncode == 0, trap.stderr
    assert [p["metadata"]["version"] for p in json.loads(trap.stdout)["install"]] == ["9.9"]

    out = run_install(target, "canary-env", str(sources["hub"]), env)
    assert out.get("error") is None, out
    assert out["version"] == out["installed"] == "0.1"
    assert out["env_ids"] == ["canary-env"]
    assert not (tmp_path / "canary").exists(), "the look-alike's code ran"


def test_install_from_an_index_url_reads_only_that_index(sources: dict[str, Path],
                                                         target: Path, tmp_path: Path) -> None:
    env = hostile_pip_setup("env", sources["evil"], tmp_path)
    with http_index(sources["hub"]) as url:
        out = run_install(target, "canary-env", url, env)
    assert out.get("error") is None, out
    assert out["version"] == out["installed"] == "0.1"
    assert not (tmp_path / "canary").exists(), "the look-alike's code ran"


def test_a_file_changed_in_the_hub_after_publishing_is_refused(sources: dict[str, Path],
                                                               target: Path,
                                                               tmp_path: Path) -> None:
    """The hub's wheel replaced (same name, the attacker's code) without its listing: the
    hash the listing pins no longer matches; over HTTP pip's hash check refuses it too. A
    9.9 dropped into the hub folder without being published (not in the listing) is not
    offered at all."""
    env = hostile_pip_setup("env", sources["evil"], tmp_path)
    hub = sources["hub"]
    make_wheel(hub, "9.9", EVIL)  # unlisted: never published
    out = run_install(target, "canary-env", str(hub), env)
    assert out.get("error") is None and out["installed"] == "0.1", out
    subprocess.run([str(target), "-m", "pip", "uninstall", "-y", "-q", DIST], check=True,
                   env=env, capture_output=True)

    wheel = hub / f"{MODULE}-0.1-py3-none-any.whl"
    tampered = make_wheel(tmp_path / "tampered", "0.1", EVIL)
    wheel.write_bytes(tampered.read_bytes())
    out = run_install(target, "canary-env==0.1", str(hub), env)
    assert out["error"] == "ChecksumMismatch" and "changed after it was published" in \
        out["message"], out
    with http_index(hub) as url:  # no local check over HTTP: pip's --require-hashes
        out = run_install(target, "canary-env==0.1", url, env)
    assert out["error"] == "ChecksumMismatch", out
    assert out["installed"] is None
    assert not (tmp_path / "canary").exists(), "the tampered wheel's code ran"


def test_a_hub_without_its_listing_or_with_a_dependency_elsewhere_is_refused(
        tmp_path: Path, target: Path) -> None:
    hub = tmp_path / "hub"
    make_wheel(hub, "0.1", GOOD)
    out = run_install(target, "canary-env", str(hub), dict(os.environ))
    assert out["error"] == "DataNotFound" and "index.html" in out["message"], out
    assert out["installed"] is None
    # a dependency that is neither installed nor in the hub is not looked for elsewhere
    publish_to_dir([make_wheel(tmp_path / "build", "0.2", GOOD,
                               requires="skyhub-test-no-such-dependency")], hub)
    out = run_install(target, "canary-env", str(hub), dict(os.environ))
    assert out["error"] == "DataNotFound", out
    assert "skyhub-test-no-such-dependency is neither installed here nor pinned in the hub" \
        in out["message"] and "pip install skyhub-test-no-such-dependency" in out["message"]
    assert out["installed"] is None


def test_hub_commands_cut_pip_off_from_every_other_source(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from skyhub.share.install import pip_environment

    cmd = pip_install_command(tmp_path / "req.txt", str(tmp_path))
    assert {"--isolated", "--no-index", "--require-hashes"} <= set(cmd)
    assert cmd[cmd.index("--find-links") + 1] == str(tmp_path.resolve())
    cmd = pip_install_command(tmp_path / "req.txt", "https://pypi.example.org/simple")
    assert "--isolated" in cmd and "--extra-index-url" not in cmd
    assert cmd[cmd.index("--index-url") + 1] == "https://pypi.example.org/simple"
    env = pip_environment({"PIP_EXTRA_INDEX_URL": "x", "pip_find_links": "y", "HOME": "/h"})
    assert env == {"PIP_CONFIG_FILE": os.devnull, "HOME": "/h"}
    assert sys.executable in pip_install_command("x")
