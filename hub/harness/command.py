"""`command:<template>`: any program that uses an OpenAI client, run once per episode.

The program reaches the model through the episode's endpoint (a gateway session) and acts in
the env through MCP, both given in its environment:

- `OPENAI_BASE_URL` (and `OPENAI_API_BASE`), `OPENAI_API_KEY`, `OPENAI_MODEL`: the model, its
  session's base URL and key, and the model id;
- `SKYHUB_MCP_URL`: the episode's env over MCP (streamable HTTP on loopback): its tools,
  `reset` (returns the instructions and the task of the running episode) and
  `episode_status`;
- `SKYHUB_TASK_FILE`, `SKYHUB_SYSTEM_PROMPT_FILE`: files holding the task (the env's first
  observation) and the env's instructions.

The template is a shell command line (`bash -c`), so `$OPENAI_MODEL` and the others expand in
it: `command:python my_agent.py --model "$OPENAI_MODEL"`. Each MCP tool call is a step of the
episode, recorded and scored by the env; the episode ends when the env ends it. A program that
exits first leaves the episode cut (a failure); one that runs past `timeout` is killed with its
process group, and the episode is cut too. Its exit status and the tail of its output are in
the episode's `meta["command"]`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from skyhub.harness.base import Endpoint, Harness, Play


class CommandHarness(Harness):
    """Args:
        template: the command line (see the module doc).
        timeout: seconds the program may run.
        cwd: where it runs (default: a fresh temporary directory per episode).
        env: more variables for it.
    """

    name = "command"

    def __init__(self, template: str, *, timeout: float = 3600.0, cwd: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        from skyhub.errors import UsageError

        if not template.strip():
            raise UsageError("command: needs a command line, e.g. command:'python agent.py'")
        self.template, self.timeout, self.cwd = template, timeout, cwd
        self.extra_env = dict(env or {})

    def play(self, play: Play, endpoint: Endpoint) -> None:
        import uvicorn

        from skyhub.mcp.server import build_server, http_app
        from skyhub.remote.http_server import UvicornThread, uvicorn_config

        server, _ = build_server("episode", play=play)
        mcp = UvicornThread(uvicorn.Server(uvicorn_config(http_app(server), "127.0.0.1", 0,
                                                          log_level="warning")),
                            "127.0.0.1", 0, name="skyhub-command-mcp").start()
        try:
            with tempfile.TemporaryDirectory(prefix="skyhub-command-") as tmp:
                task, system = Path(tmp) / "task.txt", Path(tmp) / "system_prompt.txt"
                task.write_text(play.observation)
                system.write_text(play.system_prompt or "")
                env = {**os.environ, **endpoint.environ(), **self.extra_env,
                       "SKYHUB_MCP_URL": f"{mcp.http_url}/mcp",
                       "SKYHUB_TASK_FILE": str(task), "SKYHUB_SYSTEM_PROMPT_FILE": str(system)}
                play.episode.meta["command"] = self._run(env, self.cwd or tmp)
        finally:
            mcp.stop()

    def _run(self, env: dict[str, str], cwd: str) -> dict[str, Any]:
        proc = subprocess.Popen(["bash", "-c", self.template], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=self.timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            timed_out = True
        return {"returncode": proc.returncode, "timed_out": timed_out,
                "output_tail": out.decode(errors="replace")[-4000:]}


__all__ = ["CommandHarness"]
