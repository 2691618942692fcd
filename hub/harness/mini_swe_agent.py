"""`mini-swe-agent`: the real mini-swe-agent package (pinned, `skyhub[harness]`), unmodified,
playing a terminal or Harbor episode through the gateway.

Its `DefaultAgent` runs with its own shipped config (`default`: its system and instance
prompts, observation and format-error templates) and its text-based litellm model
(`LitellmTextbasedModel`: a THOUGHT, then exactly one ```mswea_bash_command block), pointed at
the gateway session as an OpenAI-compatible server (litellm's `openai/` provider). What it
does not get is its own shell: `PlayEnvironment`, mini-swe-agent's environment interface over
the skyhub episode, runs each command as one turn of the env (`bash`), so every command is
recorded in the episode and counts against the env's turn and time budget.

How the two episodes meet:
- a command is the env's `bash` turn; its output and exit status are read back from the
  env's observation (`[exit N] /cwd`; an interrupted command is returncode -1 with the env's
  note as `exception_info`, as mini-swe-agent reports its own timeouts). By default each runs
  in a subshell of the env's persistent shell, `( ... )`, since mini-swe-agent's prompt tells
  the model that every action runs in a new subshell (`cd` and variables do not persist);
- mini-swe-agent's submit (a command whose output starts with
  `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`, exit 0) ends its run; the harness then plays the
  env's `done`, and the env's verifier gives the reward. Any other end of its run (repeated
  format errors, its own step, cost or time limits) is followed by `done` too: as in Harbor,
  the verifier decides whatever the agent thought of its work;
- the env ending the episode first (its turn budget or time limit) stops the agent at once;
- a Harbor task of several steps gets one run per step (the next step's instruction is the
  next run's task).

Format errors are mini-swe-agent's own business: it answers them without running anything,
so they cost no env turn (they are recorded in the gateway session like any request). The
model's retries are the package's (`MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT`, default 10, with
exponential waits); a model endpoint that keeps failing ends the episode as an infra error
(`run_episode`). The env's `command_timeout_s` bounds each command; mini-swe-agent's own
`timeout` settings do not apply.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyhub.harness.base import Endpoint, Harness, Play

#: The first line of output by which mini-swe-agent's environments recognise its submit.
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_STATUS = re.compile(r"^\[(?:exit (-?\d+)|interrupted)\] ", re.M)
_OUTPUT_HEAD, _OUTPUT_TAIL, _OUTPUT_EMPTY = "<output>\n", "\n</output>\n", "<output></output>\n"

ConfigSpec = str | Path | dict[str, Any]


class MiniSweAgent(Harness):
    """Args:
        config: mini-swe-agent config specs, merged in order as its `mini -c` merges them: the
            name of a config it ships ("default", "mini"), a YAML path, a dict, or
            "key.path=value" ("agent.step_limit=40", "model.model_kwargs.temperature=0").
        model_class: its model class (a name of its `_MODEL_CLASS_MAPPING` or an import path;
            None: the config's `model.model_class`, else "litellm_textbased"). The litellm
            classes reach the gateway; "litellm" with config "mini" uses native tool calls.
        subshell: run each command in a subshell of the env's shell, as mini-swe-agent's own
            environments do (False: in the persistent shell itself).
        request_timeout: seconds one model request may take.
    """

    name = "mini-swe-agent"
    families = ("terminal", "harbor")

    def __init__(self, *, config: ConfigSpec | Sequence[ConfigSpec] = "default",
                 model_class: str | None = None, subshell: bool = True,
                 request_timeout: float = 600.0) -> None:
        specs = [config] if isinstance(config, (str, Path, dict)) else list(config)
        self.config_specs, self.model_class = specs, model_class
        self.subshell, self.request_timeout = subshell, request_timeout

    def config(self, endpoint: Endpoint) -> dict[str, Any]:
        """The merged mini-swe-agent config for `endpoint`: the specs, then the model pointed
        at the endpoint (whatever model the specs name), with cost tracking errors ignored
        (its documented setting: a gateway's model has no price in litellm's registry)."""
        _quiet_imports()
        from minisweagent.config import get_config_from_spec
        from minisweagent.utils.serialize import recursive_merge

        configs = [s if isinstance(s, dict) else get_config_from_spec(s)
                   for s in self.config_specs]
        return recursive_merge(*configs, {"model": {
            "model_name": f"openai/{endpoint.model}", "cost_tracking": "ignore_errors",
            "model_kwargs": {"api_base": endpoint.base_url, "api_key": endpoint.api_key,
                             "timeout": self.request_timeout}}})

    def play(self, play: Play, endpoint: Endpoint) -> None:
        self.check(play.env)
        config = self.config(endpoint)
        import litellm
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.models import get_model_class

        # litellm prints a help banner to stdout each time it fails to price a model it does
        # not know (every request here, cost tracking being off)
        litellm.suppress_debug_info = True

        model_config = dict(config.get("model", {}))
        model_class = model_config.pop("model_class", None)
        model_class = self.model_class or model_class or "litellm_textbased"
        environment = PlayEnvironment(play, subshell=self.subshell)
        task = play.observation
        while not play.done:
            model = get_model_class(model_config["model_name"], model_class)(**model_config)
            agent = DefaultAgent(model, environment, **config.get("agent", {}))
            agent.run(task)
            if play.done:
                return
            # its run ended (submitted, or gave up): the env's verifier decides
            step = play.step(environment.action("done", {}))
            task = step.observation  # the next step's instruction (Harbor), if any


class PlayEnvironment:
    """mini-swe-agent's `Environment` interface over a skyhub episode of the shell families:
    `execute` plays each command as the env's `bash` turn and returns mini-swe-agent's result
    dict (`output`, `returncode`, `exception_info`), raising its `Submitted` on its submit
    marker and stopping the agent (an `exit` message) once the env has ended the episode."""

    def __init__(self, play: Play, *, subshell: bool = True) -> None:
        self.play, self.subshell = play, subshell
        self.config = {"subshell": subshell}

    def action(self, name: str, arguments: dict[str, Any]) -> Any:
        """The env's own text action for a call of its `bash` or `done` tool."""
        env = getattr(self.play.env, "unwrapped", self.play.env)
        return env.tool_action(name, arguments)

    def command(self, command: str, cwd: str = "") -> str:
        """What the env's shell runs for one of the agent's commands."""
        if not command.strip() or not (self.subshell or cwd):
            return command  # an empty command: the env answers it as a malformed turn
        if not self.subshell:
            return f"cd {shlex.quote(cwd)} && {command}"
        cd = f"cd {shlex.quote(cwd)} || exit\n" if cwd else ""
        return f"(\n{cd}{command}\n)"

    def execute(self, action: dict[str, Any], cwd: str = "", *,
                timeout: int | None = None) -> dict[str, Any]:
        """Run `action["command"]` as one turn of the env (`timeout`: the env's own
        `command_timeout_s` applies instead)."""
        from minisweagent.exceptions import LimitsExceeded, Submitted

        if self.play.done:  # never step an ended episode
            raise LimitsExceeded(_exit("LimitsExceeded", "the episode has ended"))
        command = str(action.get("command", ""))
        step = self.play.step(self.action("bash", {
            "command": self.command(command, cwd)}))
        output = command_result(step.observation)
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})
        if self.play.done:
            why = step.info.get("ended_by") or step.info.get("outcome")
            raise LimitsExceeded(_exit("LimitsExceeded", f"the env ended the episode ({why})"))
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """The variables its prompts use (`system`, `release`, `version`, `machine`): the
        host's `uname`, which is the sandbox's kernel for the local and Docker backends."""
        return {**self.config, **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {
            "environment": dict(self.config),
            "environment_type": f"{type(self).__module__}.{type(self).__name__}"}}}


def command_result(observation: str) -> dict[str, Any]:
    """mini-swe-agent's result dict from the shell env's observation of one command
    (`skyhub.shell.env.render`: `<output>` block, notes, `[exit N] /cwd`, turns left).
    An observation of no command (a malformed turn) is returned as output, returncode -1."""
    if observation.startswith(_OUTPUT_EMPTY):
        output, rest = "", observation[len(_OUTPUT_EMPTY):]
    elif observation.startswith(_OUTPUT_HEAD) and (
            end := observation.rfind(_OUTPUT_TAIL)) >= len(_OUTPUT_HEAD) - 1:
        output, rest = observation[len(_OUTPUT_HEAD):end] + "\n", \
            observation[end + len(_OUTPUT_TAIL):]
    else:
        return {"output": observation, "returncode": -1, "exception_info": ""}
    status = _STATUS.search(rest)
    notes = rest[:status.start()].strip() if status else rest.strip()
    code = int(status.group(1)) if status and status.group(1) is not None else -1
    return {"output": output, "returncode": code, "exception_info": notes}


def _exit(status: str, content: str) -> dict[str, Any]:
    return {"role": "exit", "content": content,
            "extra": {"exit_status": status, "submission": ""}}


def _quiet_imports() -> None:
    """Before the first import: mini-swe-agent prints a banner on import unless
    MSWEA_SILENT_STARTUP is set, and litellm fetches its model price map from GitHub unless
    LITELLM_LOCAL_MODEL_COST_MAP is set (offline machines wait for it; its bundled copy is
    enough, since cost tracking is off). A user's own settings win."""
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


__all__ = ["SUBMIT_MARKER", "MiniSweAgent", "PlayEnvironment", "command_result"]
