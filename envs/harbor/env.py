"""`HarborEnv`: Harbor tasks, step by step, in their own containers.

reset builds the task's image (cached by content), starts a container from it (limits and
network from task.toml) and a shell in its working directory; the observation is
instruction.md. The episode ends at `<done/>`, `max_turns` or the task's agent timeout;
then the verifier runs out of the agent's reach (verifier.py: the container killed so no
process of the agent's survives, the interpreters put back as the image has them, /tests
uploaded only now and /logs/verifier made empty and root-owned, the container started again
and `/bin/bash /tests/test.sh` run in a fresh exec), and the reward is read from
/logs/verifier/reward.txt, else reward.json (`reward` is the scalar; other numbers go to the
breakdown), at most 64 KiB, parsed strictly.

Who is to blame (hub/env.py's infra-error rule): the agent can make any test script fail to
leave a reward (delete what it needs, fill the disk, run code the script runs), so a missing,
garbage, oversized or non-regular reward file, a timed-out verifier, a container the agent
stopped from inside (a root agent can) are all scored 0 with `sandbox_broken=True`; the
container killed or removed from outside, or Docker gone, is an infrastructure error.

Limits (see verifier.py): an agent that is root in its container can change the programs
and files test.sh relies on besides its interpreter; and no process the agent started (a
server it was asked to leave running) is alive while the verifier runs: the image's own
entrypoint is, as in a fresh container.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import tarfile
from pathlib import Path
from typing import Any

from skyhub.envs.terminal import judge
from skyhub.envs.terminal.env import TerminalEnv
from skyhub.errors import InfraError, UsageError

from . import verifier
from .image import task_image
from .task import load_tasks
from .verifier import REWARD_JSON, REWARD_TXT

EXAMPLES = Path(__file__).parent / "data" / "examples"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _dirs_tar(dirs: dict[str, int]) -> bytes:
    """A tar of root-owned directories {path: mode}, for put_archive at "/"."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, mode in dirs.items():
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
    return buf.getvalue()


def _put_dir(container: Any, src: Path, name: str) -> None:
    """Copy a host directory to /<name> in the container, owned by root (through the
    daemon, so it works whatever the image's user)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(src, arcname=name, filter=lambda i: (setattr(i, "uid", 0), setattr(i, "gid", 0),
                                                      i)[-1])
    container.put_archive("/", buf.getvalue())


class HarborEnv(TerminalEnv):
    """Kwargs: `path` (a Harbor task or dataset directory; required for `harbor`),
    `max_turns`, `command_timeout` (s per command), `max_tool_calls` and `turn_timeout` (per
    turn, as for `terminal`), `max_output`. Docker only: a Harbor task is its Docker image."""

    def __init__(self, *, path: str | Path | None = None, max_turns: int = 50,
                 command_timeout: float = 60.0, max_output: int = 16384,
                 max_tool_calls: int = 8, turn_timeout: float | None = None) -> None:
        if path is None:
            raise UsageError("harbor needs path= a Harbor task directory (task.toml, "
                             "instruction.md, environment/, tests/) or a dataset of them; "
                             "`harbor-examples` has bundled ones")
        super().__init__(path=path, backend="docker", max_turns=max_turns,
                         command_timeout=command_timeout, max_output=max_output,
                         max_tool_calls=max_tool_calls, turn_timeout=turn_timeout)
        # network access is per task (task.toml), so the shared prompt does not promise none
        self.system_prompt = self.system_prompt.replace("there is no network and ", "there is ")

    def _load_tasks(self, *, synth: bool, seed: int, n_tasks: int,
                    path: str | Path | None) -> Any:
        assert path is not None
        return load_tasks(path)

    def _prepare(self, task: Any) -> Any:
        """A new container of the task's image (a Harbor task may change anything in it)."""
        from skyhub.sandbox.docker import DockerSandbox, get_client

        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        cfg = task.meta["config"]
        client = get_client()
        tag = task_image(task.meta["path"], cfg, client)
        workdir = client.images.get(tag).attrs.get("Config", {}).get("WorkingDir") or "/"
        self._sandbox = DockerSandbox(image=tag, cpus=cfg["cpus"], memory_mb=cfg["memory_mb"],
                                      network=cfg["network"], workdir=workdir, pool="harbor",
                                      client=client)
        # /logs/agent is the agent's (Harbor's agent log directory); /logs/verifier is made
        # only for the verifier (verifier.prepare_dirs)
        self._sandbox.container.put_archive("/", _dirs_tar({"logs": 0o755,
                                                             "logs/agent": 0o777}))
        return self._sandbox

    def _judge(self) -> tuple[float | None, dict[str, float], dict[str, Any]]:
        """Run tests/test.sh out of the agent's reach (module docstring, verifier.py) and read
        its reward. InfraError: the sandbox was lost (the caller asks whom to blame)."""
        import docker.errors
        import requests.exceptions

        try:
            return self._run_tests()
        except (docker.errors.DockerException, requests.exceptions.RequestException,
                tarfile.TarError) as e:
            raise InfraError(f"Docker failed while the verifier ran: {e}") from e

    def _run_tests(self) -> tuple[float | None, dict[str, float], dict[str, Any]]:
        assert self.task is not None
        cfg, sb = self.task.meta["config"], self._sandbox
        sb.container.reload()
        if sb.container.status != "running":
            if judge.who_broke(sb) == "host":
                raise InfraError(f"sandbox container {sb.container.name} was stopped from "
                                 "outside")
            self._broken = self._broken or "the agent stopped its own container"
        verifier.stop(sb)
        extra: dict[str, Any] = {}
        env = {**judge.VERIFIER_ENV, "HOME": "/root", "PATH": self._image_path(sb),
               **(cfg.get("verifier_env") or {})}
        killed: list[bool] = []

        def kill() -> None:  # past the deadline: everything in the container
            killed.append(True)
            with contextlib.suppress(Exception):
                sb.container.kill()

        try:
            # Docker's diff is the slow part (~0.1-1 s): the directories are made meanwhile
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                restored = pool.submit(verifier.restore_interpreters, sb,
                                       self._entrypoint(sb))
                try:
                    verifier.prepare_dirs(sb, Path(self.task.meta["path"]) / "tests")
                finally:
                    extra["restored_files"] = restored.result()
            verifier.start(sb)
            r = judge.docker_exec(sb, ["/bin/bash", "/tests/test.sh"], user="0",
                                  cwd=sb.workdir, env=env, timeout=cfg["verifier_timeout_s"],
                                  on_timeout=kill)
        except verifier.Tampered as e:
            return 0.0, {}, dict(extra, sandbox_broken=True,
                                 error=f"the verifier cannot run faithfully: {e}")
        extra.update(verifier_exit_code=r.exit_code, verifier_timed_out=r.timed_out,
                     verifier_output=(r.stdout + r.stderr)[-2000:])
        sb.container.reload()
        if sb.container.status != "running" and not killed:
            if judge.who_broke(sb) == "host":
                raise InfraError(f"sandbox container {sb.container.name} was stopped from "
                                 "outside while the verifier ran")
            extra["sandbox_broken"] = True  # stopped from inside, by what test.sh ran
        try:
            reward, breakdown = verifier.read_reward(sb)
        except verifier.BadReward as e:
            why = " (the verifier ran past its timeout)" if r.timed_out else ""
            return 0.0, {}, dict(extra, sandbox_broken=True, error=f"{e}{why}")
        return reward, {"reward": reward, **breakdown}, extra

    @staticmethod
    def _image_path(sb: Any) -> str:
        """The PATH the image sets (its author's, out of the agent's reach), else Debian's."""
        for item in sb.client.images.get(sb.image).attrs.get("Config", {}).get("Env") or []:
            if item.startswith("PATH="):
                return item[5:]
        return DEFAULT_PATH

    @staticmethod
    def _entrypoint(sb: Any) -> tuple[str, ...]:
        """The image's entrypoint program, when it is named by an absolute path."""
        entry = sb.client.images.get(sb.image).attrs.get("Config", {}).get("Entrypoint") or []
        return tuple(p for p in entry[:1] if isinstance(p, str) and p.startswith("/"))

    def reference_action(self) -> str | None:
        """The oracle: uploads solution/ to /solution (only now, so an agent never sees it)
        and runs solve.sh, then `<done/>`."""
        if self.task is None:
            return None
        solution = Path(self.task.meta["path"]) / "solution"
        if self.task.answer and not self._reference_sent and solution.is_dir():
            self._reference_sent = True
            with contextlib.suppress(Exception):
                _put_dir(self._sandbox.container, solution, "solution")
            return f"<bash>(cd {self._sandbox.workdir} && bash /solution/solve.sh)</bash>"
        return "<done/>"


__all__ = ["EXAMPLES", "REWARD_JSON", "REWARD_TXT", "HarborEnv"]
