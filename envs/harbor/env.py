"""`HarborEnv`: Harbor tasks, step by step, in their own containers.

reset builds the task's image (cached by content), starts a container from it (limits and
network from task.toml) and a shell in its working directory; the observation is
instruction.md. The episode ends at `<done/>`, `max_turns` or the task's agent timeout;
then `tests/` is uploaded to /tests, `bash /tests/test.sh` runs, and the reward is read from
/logs/verifier/reward.json (`reward` is the scalar; other numbers go to the breakdown) or
/logs/verifier/reward.txt. No readable reward file is an infrastructure error, not a 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

from skyhub.envs.terminal.env import TerminalEnv
from skyhub.errors import UsageError

from .image import task_image
from .task import load_tasks

EXAMPLES = Path(__file__).parent / "data" / "examples"
REWARD_JSON, REWARD_TXT = "/logs/verifier/reward.json", "/logs/verifier/reward.txt"


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
    `max_turns`, `command_timeout` (s per command), `max_output`. Docker only: a Harbor
    task is its Docker image."""

    def __init__(self, *, path: str | Path | None = None, max_turns: int = 50,
                 command_timeout: float = 60.0, max_output: int = 16384) -> None:
        if path is None:
            raise UsageError("harbor needs path= a Harbor task directory (task.toml, "
                             "instruction.md, environment/, tests/) or a dataset of them; "
                             "`harbor-examples` has bundled ones")
        super().__init__(path=path, backend="docker", max_turns=max_turns,
                         command_timeout=command_timeout, max_output=max_output)
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
        self._sandbox.container.exec_run(["sh", "-c", "mkdir -p /logs/verifier && "
                                          "chmod 777 /logs /logs/verifier"], user="0")
        return self._sandbox

    def _judge(self) -> tuple[float | None, dict[str, float], dict[str, Any]]:
        assert self.task is not None
        cfg, sb = self.task.meta["config"], self._sandbox
        _put_dir(sb.container, Path(self.task.meta["path"]) / "tests", "tests")
        r = sb.exec(["bash", "/tests/test.sh"], timeout=cfg["verifier_timeout_s"],
                    env=cfg.get("verifier_env") or None)
        extra: dict[str, Any] = {"verifier_exit_code": r.exit_code,
                                 "verifier_output": (r.stdout + r.stderr)[-2000:]}
        breakdown: dict[str, float] = {}
        try:
            raw = sb.read_file(REWARD_JSON)
            doc = json.loads(raw)
            reward = float(doc["reward"])
            breakdown = {k: float(v) for k, v in doc.items()
                         if k != "reward" and isinstance(v, int | float)}
        except FileNotFoundError:
            try:
                reward = float(sb.read_file(REWARD_TXT).decode("utf-8").strip())
            except (FileNotFoundError, ValueError, UnicodeDecodeError) as e:
                return None, {}, dict(extra, error=f"tests/test.sh left no readable reward in "
                                      f"{REWARD_TXT} or {REWARD_JSON} ({e})")
        except (ValueError, KeyError, TypeError) as e:
            return None, {}, dict(extra, error=f"{REWARD_JSON} is not a JSON object with a "
                                  f"numeric 'reward' ({e})")
        return reward, {"reward": reward, **breakdown}, extra

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


__all__ = ["EXAMPLES", "HarborEnv"]
