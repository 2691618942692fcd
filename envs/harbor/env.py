"""`HarborEnv`: Harbor tasks, step by step, in their own containers, run as Harbor runs them.

reset builds the task's image (image.py: BuildKit, the compose file's main service, cached by
content), starts a container from it as Harbor's Docker environment does (container.py: root
with Docker's default capabilities, the task's network mode, env, workdir, /logs, the
healthcheck awaited), and a shell for the agent as `[agent] user`; the observation is
instruction.md. The episode ends at `<done/>`, `max_turns` or the agent's `timeout_sec`; then
the verifier runs (verifier.py) and the reward is read from /logs/verifier/reward.json (any
object of named rewards: all go to `reward_breakdown`; the episode's reward is `reward`, the
only value, or the `reward_key=` the user names), else reward.txt.

The oracle (`reference_action`, the `oracle` agent) runs solution/solve.sh as Harbor's oracle
does: uploaded to /solution only then, executed directly (its shebang decides the
interpreter) with `[solution.env]`, as the agent's user, under the agent's timeout, output to
/logs/agent/oracle.txt. Its action names a one-time token, so only the oracle gets that
treatment; any other action is the agent's, typed into its shell.

Multi-step tasks (`[[steps]]`): each step's instruction comes after the previous step's
verifier has run in the same container; `min_reward` ends the episode early, and the
episode's rewards are the per-key mean of the steps' (or the last step's, with
`multi_step_reward_strategy = "final"`). Unlike Harbor, a step that was never reached (the
turn budget ran out, a gate closed) or left no usable reward counts 0 in the mean: otherwise a
policy could raise its mean by breaking a later step's verifier.

Who is to blame (hub/env.py's infra-error rule): the agent can make any test script fail to
leave a reward (delete what it needs, fill the disk, run code the script runs), so a missing,
garbage, oversized or non-regular reward file, or a container the agent stopped from inside
(a root agent can), is scored 0 with `sandbox_broken=True`. A verifier past its `timeout_sec`
is the agent's failure too unless test.sh also outlives it in a fresh container of the
task's pristine image (then infra: the task's tests are too slow). A build or healthcheck
failure, the container killed or removed from outside, or Docker gone, is an infrastructure
error.

The verifier's two faces (verifier.py): `isolation="harbor"` runs test.sh in the agent's
container with the agent's processes alive, as Harbor does (and as forgeable by a root agent
as Harbor's shared mode); `isolation="training"` runs the agent without capabilities or
network and computes the verdict in a fresh container of the task's image that holds the
agent's results only as data (its workdir, /logs/artifacts, the task's artifacts,
`verifier_paths=`): services the agent started are not there, and `info["verifier_note"]`
says so when the agent left processes running.

Over ~400 lines, for a reason: one episode flow (agent, oracle, steps, verifier phases,
logs), each phase short; split, a reader would jump between files to follow an episode.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import secrets
import tarfile
import time
from pathlib import Path
from typing import Any

from skyhub.env import StepResult
from skyhub.errors import InfraError, SandboxUnavailable, UsageError
from skyhub.shell import judge
from skyhub.shell.env import ShellEnv
from skyhub.shell.session import ShellSession

from . import container, verifier
from .image import task_image
from .task import load_tasks, resolve_env
from .verifier import REWARD_JSON, REWARD_TXT

EXAMPLES = Path(__file__).parent / "data" / "examples"
ORACLE_LOG = "/logs/agent/oracle.txt"
TEST_STDOUT = "/logs/verifier/test-stdout.txt"
OUTPUT_TAIL = 4000


def _put_dir(container_: Any, src: Path, name: str) -> None:
    """Copy a host directory to /<name> in the container, owned by root (through the
    daemon, so it works whatever the image's user)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(src, arcname=name, filter=lambda i: (setattr(i, "uid", 0), setattr(i, "gid", 0),
                                                      i)[-1])
    container_.put_archive("/", buf.getvalue())


class HarborEnv(ShellEnv):
    """Kwargs: `data_dir` (a Harbor task or dataset directory, or a Terminal-Bench one;
    required), `max_turns`, `command_timeout_s` (per agent command),
    `max_tool_calls` and `turn_timeout_s` (per turn, as for `terminal`:
    `skyhub.shell.env.ShellEnv`), `max_output`, `isolation` ("harbor": as Harbor runs tasks;
    "training": skyhub's stricter sandbox), `reward_key` (which named reward of reward.json is
    the episode's reward, when it has several and no `reward`), `allowlist` ("no-network" or
    "public": how to run a task whose network_mode is "allowlist", which skyhub cannot
    enforce), `logs_dir` (where each episode's /logs is saved, as Harbor keeps a trial's
    logs: `<logs_dir>/<task>/<n>/{agent,verifier,artifacts}`; default a temporary directory,
    kept), `verifier_paths` (under `isolation="training"`: more directories the tests read
    the agent's results from, besides the workdir and artifacts; never a system tree).
    Docker only: a Harbor task is its Docker image."""

    # the oracle's one-time token (reference_action) differs between two plays
    replay_ignore = (r"# skyhub oracle [0-9a-f]{16}",)

    def __init__(self, *, data_dir: str | Path | None = None, max_turns: int = 50,
                 command_timeout_s: float = 60.0, max_output: int = 16384,
                 max_tool_calls: int = 8, turn_timeout_s: float | None = None,
                 isolation: str = "harbor", reward_key: str | None = None,
                 allowlist: str | None = None, logs_dir: str | Path | None = None,
                 verifier_paths: list[str] | tuple[str, ...] = ()) -> None:
        if data_dir is None:
            raise UsageError("harbor needs data_dir= a Harbor task directory (task.toml, "
                             "instruction.md, environment/, tests/) or a dataset of them; "
                             "`harbor-examples` has bundled ones")
        if isolation not in container.ISOLATIONS:
            raise UsageError(f"isolation must be one of {container.ISOLATIONS}, got "
                             f"{isolation!r}")
        for path in verifier_paths:
            if (problem := verifier.data_root_problem(str(path))) is not None:
                raise UsageError(f"verifier_paths: {problem}; name directories of data the "
                                 "tests read (e.g. '/tmp/out'), never where programs live")
        self.verifier_paths = [posixpath.normpath(str(p)) for p in verifier_paths]
        if allowlist not in (None, "no-network", "public"):
            raise UsageError(f"allowlist must be 'no-network' or 'public', got {allowlist!r}")
        super().__init__(tasks=load_tasks(data_dir), backend="docker", max_turns=max_turns,
                         command_timeout_s=command_timeout_s, max_output=max_output,
                         max_tool_calls=max_tool_calls, turn_timeout_s=turn_timeout_s)
        self.isolation, self.reward_key, self.allowlist = isolation, reward_key, allowlist
        self.logs_dir = Path(logs_dir).expanduser() if logs_dir is not None else None
        self._episodes = 0
        if isolation == "harbor":  # network access is per task (task.toml)
            self.system_prompt = self.system_prompt.replace("there is no network and ",
                                                            "there is ")
        self._step = 0
        self._step_rewards: list[dict[str, float] | None] = []
        self._step_extra: list[dict[str, Any]] = []
        self._oracle_action: str | None = None
        self._verified = False  # the current step's verifier has run already
        self._failed: Exception | None = None  # ... and Docker failed while it did
        self._image_user = "0"

    # -- the task's config, for the current step ----------------------------------------
    @property
    def _cfg(self) -> dict[str, Any]:
        assert self.task is not None
        return self.task.meta["config"]

    def _steps(self) -> list[dict[str, Any]]:
        return list(self._cfg.get("steps") or [])

    def _phase(self, key: str) -> Any:
        """A per-step setting when the task has steps and the step sets it, else the task's."""
        steps = self._steps()
        if steps and steps[self._step].get(key) is not None:
            return steps[self._step][key]
        return self._cfg.get(key)

    def _instruction(self) -> str:
        steps = self._steps()
        assert self.task is not None
        return str(steps[self._step].get("instruction") or "").strip() if steps \
            else self.task.prompt

    def _run_user(self, key: str) -> str:
        user = self._phase(key)
        return str(user) if user is not None else str(self._image_user)

    # -- episodes ----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self._step, self._step_rewards, self._step_extra = 0, [], []
        self._oracle_action, self._verified, self._failed = None, False, None
        obs, info = super().reset(seed=seed, options=options)
        self._deadline = time.monotonic() + self._agent_timeout()
        if self._steps():
            obs = self._instruction()
            info["step"] = self._steps()[0]["name"]
        return obs, info

    def _agent_timeout(self) -> float:
        return float(self._phase("agent_timeout_s") or 600.0)

    def _prepare(self, task: Any) -> Any:
        """A new container of the task's image (a Harbor task may change anything in it),
        healthy, with the first step's files and setup in place."""
        from skyhub.sandbox.docker_client import get_client

        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        cfg = task.meta["config"]
        container.refuse_unsupported(cfg, task.id)
        env_cfg = cfg["environment"]
        network = container.network_on(env_cfg, isolation=self.isolation,
                                       allowlist=self.allowlist, task_id=task.id,
                                       phase_mode=cfg.get("agent_network_mode"))
        client = get_client()
        image = task_image(task.meta["path"], env_cfg, client,
                           build_timeout_s=cfg.get("build_timeout_s"))
        self._image_user = image.user or (client.images.get(image.tag).attrs.get(
            "Config", {}).get("User") or "0")
        self._sandbox = container.start_task_container(
            image, env_cfg, user=None if (user := self._phase("agent_user")) is None else str(user),
            env=resolve_env(env_cfg.get("env") or {}, task=task.id),
            isolation=self.isolation, network=network, client=client)
        try:
            container.await_healthy(self._sandbox, env_cfg.get("healthcheck"),
                                    user=str(self._image_user), task_id=task.id)
            self._setup_step(task)
        except BaseException:
            self._sandbox.close()
            self._sandbox = None
            raise
        return self._sandbox

    def _setup_step(self, task: Any) -> None:
        """A step's workdir files (steps/<name>/workdir/) copied into the workdir and its
        setup.sh run, then its own healthcheck, as Harbor prepares a step."""
        steps = task.meta["config"].get("steps") or []
        if not steps:
            return
        step, sb = steps[self._step], self._sandbox
        src = Path(step.get("workdir_dir") or Path(task.meta["path"]) / "steps" / step["name"]
                   / "workdir")
        if src.is_dir():
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for p in sorted(src.iterdir()):
                    tar.add(p, arcname=p.name)
            sb.container.put_archive(sb.workdir, buf.getvalue())
            if (src / "setup.sh").is_file():
                r = judge.docker_exec(sb, ["bash", f"{sb.workdir.rstrip('/')}/setup.sh"],
                                      user=str(sb.user), cwd=sb.workdir, timeout=300.0,
                                      on_timeout=lambda: judge.kill_processes(sb))
                if r.exit_code != 0:
                    raise SandboxUnavailable(
                        f"Harbor task {task.id}, step {step['name']}: setup.sh exited "
                        f"{r.exit_code}: {(r.stderr or r.stdout)[-300:]}")
        container.await_healthy(sb, step.get("healthcheck"), user=str(sb.user),
                                task_id=task.id)

    def step(self, action: str) -> StepResult:
        if self._oracle_action is not None and action.strip() == self._oracle_action:
            self._oracle_action = None
            with self._episode_clock():  # the oracle's time counts like any step's
                return self._oracle_step()
        return super().step(action)

    def _verify(self, obs: str, *, ended_by: str) -> StepResult:
        """The episode's end or a step's: see `_next_step`. The final info says in one line
        why an episode did not succeed (`why`) and where its logs were saved (`logs`)."""
        result = self._next_step(obs, ended_by=ended_by)
        info = result[4]
        if info.get("outcome") != "running":
            logs = self._save_logs()
            if logs is not None:
                info["logs"] = str(logs)
            why = _why(info)
            if why:
                info["why"] = why
        return result

    def _next_step(self, obs: str, *, ended_by: str) -> StepResult:
        """After a step of a multi-step task: its verifier, then the next step's instruction
        (the same container, a new shell); the last step (or a closed gate) ends the episode
        through ShellEnv's `_verify`, whose `_judge` gives the aggregate."""
        steps = self._steps()
        if not steps or self._step + 1 >= len(steps) or ended_by not in ("done", "timeout"):
            return super()._verify(obs, ended_by=ended_by)
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        self._verified = True
        try:
            self._verify_step()
        except (InfraError, SandboxUnavailable) as e:
            self._failed = e  # _judge raises it again: the episode ends as an infra error
            return super()._verify(obs, ended_by=ended_by)
        gate = self._gate_closed()
        if gate or self._step_rewards[-1] is None:  # Harbor stops after a failed verifier
            self._step_extra[-1].setdefault("gate", gate or "the step's verifier left no "
                                            "usable reward")
            return super()._verify(obs, ended_by=ended_by)
        self._verified = False
        self._step += 1
        self._reference_sent = False
        try:
            self._setup_step(self.task)
            self._shell = ShellSession(self._sandbox, max_output=self.max_output)
        except (InfraError, SandboxUnavailable) as e:
            return self._sandbox_lost(obs, e)
        self._deadline = time.monotonic() + self._agent_timeout()
        name = steps[self._step]["name"]
        text = f"{obs}\n\n" if obs.strip() else ""
        return (f"{text}[step {self._step + 1} of {len(steps)}: {name}]\n{self._instruction()}",
                0.0, False, False, self.make_info(step=name))

    def _save_logs(self) -> Path | None:
        """Copy the container's /logs to the host (at most `MAX_LOGS_BYTES`, safely: what the
        agent put there is data, never paths or links that leave the directory)."""
        sb = self._sandbox
        if sb is None or sb.closed or self.task is None:
            return None
        self._episodes += 1
        root = self.logs_dir or _default_logs_dir()
        dest = root / _slug(self.task.id) / f"{self._episodes:04d}-{secrets.token_hex(3)}"
        try:
            stream, _ = sb.container.get_archive("/logs")
            buf, size = io.BytesIO(), 0
            for chunk in stream:
                size += len(chunk)
                if size > MAX_LOGS_BYTES:
                    break
                buf.write(chunk)
            buf.seek(0)
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(fileobj=buf, mode="r|") as tar:
                for m in tar:
                    if not (m.isreg() or m.isdir()) or not m.name.startswith("logs"):
                        continue
                    m.name = m.name[len("logs"):].lstrip("/") or "."
                    with contextlib.suppress(tarfile.TarError, OSError):
                        tar.extract(m, dest, filter="data")
        except Exception:  # logs are for the user; the episode's result stands
            return dest if dest.is_dir() else None
        return dest

    def _gate_closed(self) -> str | None:
        """Harbor's `min_reward`: why the remaining steps are skipped, or None."""
        minimum = self._steps()[self._step].get("min_reward")
        if minimum is None:
            return None
        rewards = self._step_rewards[-1] or {}
        wanted = {"reward": float(minimum)} if isinstance(minimum, int | float) else minimum
        for key, threshold in wanted.items():
            got = rewards.get(key, float("-inf"))
            if got < float(threshold):
                return f"{key}={got} below min_reward {threshold}"
        return None

    # -- the verifier ---------------------------------------------------------------------
    def _judge(self) -> tuple[float | None, dict[str, float], dict[str, Any]]:
        """The verifier of the current step (or the task), then the episode's reward: the
        step's, or the steps' aggregate. InfraError: the sandbox was lost (the caller asks
        whom to blame)."""
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed
        if not self._verified:
            self._verify_step()
        self._verified = False
        steps = self._steps()
        extra: dict[str, Any] = dict(self._step_extra[-1]) if self._step_extra else {}
        if not steps:
            rewards = self._step_rewards[-1]
            if rewards is None:
                return 0.0, {}, extra
            return verifier.scalar_reward(rewards, self.reward_key, self.task.id), \
                dict(rewards), extra
        per_step = self._step_rewards + [None] * (len(steps) - len(self._step_rewards))
        if self._cfg.get("multi_step_reward_strategy") == "final":
            rewards = per_step[len(self._step_rewards) - 1] or {}
        else:
            keys = sorted({k for r in per_step if r for k in r})
            rewards = {k: sum((r or {}).get(k, 0.0) for r in per_step) / len(per_step)
                       for k in keys}
        extra["steps"] = [{"name": s["name"], "rewards": r,
                           **{k: v for k, v in (e or {}).items() if k in (
                               "error", "gate", "verifier_exit_code")}}
                          for s, r, e in zip(steps, per_step,
                                             self._step_extra + [None] * len(steps),
                                             strict=False)]
        breakdown = {f"{s['name']}/{k}": v for s, r in zip(steps, per_step, strict=True)
                     if r for k, v in r.items()}
        if not rewards:
            return 0.0, breakdown, extra
        return verifier.scalar_reward(rewards, self.reward_key, self.task.id), \
            {**rewards, **breakdown}, extra

    def _verify_step(self) -> None:
        """Run the current step's (or the task's) verifier and record its rewards (None: it
        left none it could be scored by) and what it said. InfraError when Docker failed."""
        import docker.errors
        import requests.exceptions

        try:
            mode = self._phase("verifier_mode") or "shared"
            rewards, extra = (self._run_separate() if mode == "separate" else
                              self._run_shared())
        except (docker.errors.DockerException, requests.exceptions.RequestException,
                tarfile.TarError) as e:
            raise InfraError(f"Docker failed while the verifier ran: {e}") from e
        self._step_rewards.append(rewards)
        self._step_extra.append(extra)

    def _verifier_env(self) -> dict[str, str]:
        assert self.task is not None
        env = dict(self._cfg.get("verifier_env") or {})
        steps = self._steps()
        if steps:
            env.update(steps[self._step].get("verifier_env") or {})
        return {**judge.VERIFIER_ENV, **resolve_env(env, task=self.task.id)}

    def _tests_dirs(self) -> list[Path]:
        """What goes to /tests: the task's tests/, then the step's own (Harbor's order)."""
        steps = self._steps()
        if steps:
            return [Path(p) for p in steps[self._step].get("tests_dirs") or []]
        tests = self._cfg.get("tests_dir")
        return [Path(tests)] if tests else []

    def _run_shared(self) -> tuple[dict[str, float] | None, dict[str, Any]]:
        """The verifier where Harbor runs it (`verifier_mode = "shared"`): for
        `isolation="harbor"`, in the agent's container with the agent's processes alive (a
        server it started is there for the tests); for "training", in a fresh container of
        the task's image holding the agent's results as data (`_run_training`)."""
        sb = self._sandbox
        sb.container.reload()
        if sb.container.status != "running":
            if judge.who_broke(sb) == "host":
                raise InfraError(f"sandbox container {sb.container.name} was stopped from "
                                 "outside")
            self._broken = self._broken or "the agent stopped its own container"
        if self.isolation == "training":
            return self._run_training()
        if sb.container.status != "running":  # its processes are gone: its files are not
            sb.container.start()
        verifier.prepare_dirs(sb, self._tests_dirs(), check=False)
        return self._run_test_script(sb, {})

    def _verifier_container(self, *, pool: str) -> Any:
        """A fresh container of the task's image as built (the agent's isolation, no
        network under training), healthy, with the step's (or task's) tests in /tests."""
        from skyhub.sandbox.docker import get_client

        assert self.task is not None
        env_cfg = self._cfg["environment"]
        client = get_client()
        image = task_image(self.task.meta["path"], env_cfg, client,
                           build_timeout_s=self._cfg.get("build_timeout_s"))
        network = container.network_on(env_cfg, isolation=self.isolation,
                                       allowlist=self.allowlist, task_id=self.task.id,
                                       phase_mode=self._cfg.get("verifier_network_mode"))
        vsb = container.start_task_container(
            image, env_cfg, user=None, env=resolve_env(env_cfg.get("env") or {},
                                                       task=self.task.id),
            isolation=self.isolation, network=network, client=client, pool=pool)
        try:
            container.await_healthy(vsb, env_cfg.get("healthcheck"),
                                    user=str(self._image_user), task_id=self.task.id)
            verifier.prepare_dirs(vsb, self._tests_dirs())
        except BaseException:
            vsb.close()
            raise
        return vsb

    def _data_roots(self) -> list[str]:
        """Where the training verifier finds the agent's results (verifier.py): the
        workdir, /logs/agent, /logs/artifacts, the declared artifacts and `verifier_paths`,
        less those that cannot be data roots (e.g. a workdir of "/")."""
        sb = self._sandbox
        wanted = [sb.workdir, "/logs/agent", "/logs/artifacts", *self.verifier_paths]
        steps = self._steps()
        for entry in [*(self._cfg.get("artifacts") or []),
                      *((steps[self._step].get("artifacts") or []) if steps else [])]:
            wanted.append(entry["source"] if isinstance(entry, dict) else str(entry))
        roots: list[str] = []
        for path in wanted:
            norm = posixpath.normpath(path) if path.startswith("/") else path
            if verifier.data_root_problem(norm) is None and not any(
                    norm == r or norm.startswith(r.rstrip("/") + "/") for r in roots):
                roots = [r for r in roots if not r.startswith(norm.rstrip("/") + "/")] + [norm]
        return roots

    def _run_training(self) -> tuple[dict[str, float] | None, dict[str, Any]]:
        """The verdict from a pristine root: the agent's container frozen (its processes
        cannot change what is copied), its changed data roots copied into a fresh container
        of the image, test.sh run there; the verifier's /logs/verifier is then put in the
        agent's container so the episode's logs hold it. The agent's container is never
        executed in."""
        sb = self._sandbox
        extra: dict[str, Any] = {"verifier_root": "pristine image"}
        left = _left_running(sb)
        if left:
            extra["verifier_note"] = (
                f"the agent left {len(left)} process(es) running ({'; '.join(left[:3])}); "
                "under isolation='training' the verifier runs in a fresh container of the "
                "task's image and sees only the agent's files (its workdir, /logs/artifacts, "
                "the task's artifacts, verifier_paths=), not its running services; "
                "use isolation='harbor' for tasks whose tests need them")
        roots = self._data_roots()
        vsb = self._verifier_container(pool="harbor-verifier")
        paused = False
        try:
            sb.container.reload()
            if sb.container.status == "running":
                sb.container.pause()
                paused = True
            changed = verifier.changed_roots(sb.container.diff() or [], roots)
            budget = [verifier.MAX_DATA_BYTES]
            try:
                extra["copied"] = {r: verifier.copy_data(sb, vsb, r, budget=budget)
                                   for r in changed}
            except verifier.Tampered as e:
                return None, dict(extra, sandbox_broken=True, error=str(e))
            finally:
                if paused:
                    sb.container.unpause()
                    paused = False
            rewards, extra = self._run_test_script(vsb, extra)
            with contextlib.suppress(Exception):  # the logs are for the user
                self._carry_logs(vsb, sb)
            return rewards, extra
        finally:
            if paused:
                with contextlib.suppress(Exception):
                    sb.container.unpause()
            vsb.close()

    @staticmethod
    def _carry_logs(src: Any, dest: Any) -> None:
        """/logs/verifier of the verifier's container into the agent's (bounded), where the
        episode's logs are saved from."""
        stream, _ = src.container.get_archive("/logs/verifier")
        buf, size = io.BytesIO(), 0
        for chunk in stream:
            size += len(chunk)
            if size > MAX_LOGS_BYTES:
                return
            buf.write(chunk)
        dest.container.put_archive("/logs", buf.getvalue())

    def _run_separate(self) -> tuple[dict[str, float] | None, dict[str, Any]]:
        """The verifier in a container of its own (`[verifier] environment_mode =
        "separate"`): built from tests/ (the step's, if it has one), holding only the
        artifacts the task lists and /logs/artifacts, copied from the agent's container."""
        from skyhub.sandbox.docker import get_client

        assert self.task is not None
        vcfg = self._phase("verifier_environment") or self._cfg["environment"]
        client = get_client()
        image = task_image(self.task.meta["path"], vcfg, client,
                           build_timeout_s=self._cfg.get("build_timeout_s"))
        network = container.network_on(vcfg, isolation=self.isolation, allowlist=self.allowlist,
                                       task_id=self.task.id,
                                       phase_mode=self._cfg.get("verifier_network_mode"))
        vsb = container.start_task_container(image, vcfg, user=None,
                                             env=resolve_env(vcfg.get("env") or {},
                                                                 task=self.task.id),
                                             isolation=self.isolation, network=network,
                                             client=client, pool="harbor-verifier")
        try:
            self._copy_artifacts(self._sandbox, vsb)
            return self._run_test_script(vsb, {"verifier_mode": "separate"})
        finally:
            vsb.close()

    def _copy_artifacts(self, src: Any, dest: Any) -> None:
        """/logs/artifacts and each of the task's (and step's) artifacts, from the agent's
        container to the same paths in the verifier's (Harbor re-materialises them there),
        through the filtered copy (verifier.copy_data: no link leads a member elsewhere)."""
        entries = [{"source": "/logs/artifacts"}, *(self._cfg.get("artifacts") or [])]
        steps = self._steps()
        if steps:
            entries += steps[self._step].get("artifacts") or []
        budget = [verifier.MAX_DATA_BYTES]
        for entry in entries:
            source = entry["source"] if isinstance(entry, dict) else str(entry)
            target = (entry.get("destination") if isinstance(entry, dict) else None) or source
            with verifier.archive(src.client.api, src.container.id, source) as (stat, _):
                if stat is None:  # the agent did not make it: nothing to copy
                    continue
            parent = target.rsplit("/", 1)[0] or "/"
            dest.container.put_archive("/", container.dirs_tar(
                {p: 0o777 for p in _parents(parent)}))
            if target == source:
                verifier.copy_data(src, dest, source, budget=budget)
                continue
            stream, _ = src.container.get_archive(source)
            data = _renamed(b"".join(stream), source.rsplit("/", 1)[-1],
                            target.rsplit("/", 1)[-1])
            dest.container.put_archive(parent, data)

    def _run_test_script(self, sb: Any, extra: dict[str, Any]
                         ) -> tuple[dict[str, float] | None, dict[str, Any]]:
        """tests/test.sh as Harbor runs it: made executable, then run directly (its shebang
        decides) as the verifier's user in the workdir with `[verifier.env]`, its output to
        /logs/verifier/test-stdout.txt, under the verifier's timeout (past it, an
        infrastructure error); then the rewards it left."""
        timeout = float(self._phase("verifier_timeout_s") or 600.0)
        killed: list[bool] = []

        def kill() -> None:  # past the deadline: everything in the container
            killed.append(True)
            with contextlib.suppress(Exception):
                sb.container.kill()

        judge.docker_exec(sb, ["chmod", "+x", "/tests/test.sh"], user="0", timeout=60)
        env = {"PATH": container.container_path(sb), **self._verifier_env()}
        r = judge.docker_exec(sb, ["bash", "-c", f"(/tests/test.sh) > {TEST_STDOUT} 2>&1"],
                              user=self._run_user("verifier_user"), cwd=sb.workdir, env=env,
                              timeout=timeout, on_timeout=kill)
        extra.update(verifier_exit_code=r.exit_code, verifier_timed_out=r.timed_out,
                     verifier_log=TEST_STDOUT)
        if r.timed_out:
            if self._pristine_times_out(timeout):
                raise _TasksTooSlow(f"the verifier ran past its timeout_sec ({timeout:g} s), on "
                                 "the task's pristine image too; raise [verifier] timeout_sec "
                                 "in task.toml if the tests need longer")
            return None, dict(extra, sandbox_broken=True, error=(
                f"the verifier ran past its timeout_sec ({timeout:g} s) with the agent's "
                "changes, and finished in time on the task's pristine image: the agent's "
                "changes made it hang"))
        sb.container.reload()
        if sb.container.status != "running":
            if judge.who_broke(sb) == "host":
                raise InfraError(f"sandbox container {sb.container.name} was stopped from "
                                 "outside while the verifier ran")
            extra["sandbox_broken"] = True  # stopped from inside, by what test.sh ran
            extra["verifier_output"] = (r.stdout + r.stderr)[-OUTPUT_TAIL:]
        else:
            extra["verifier_output"] = self._tail(sb, TEST_STDOUT) or (r.stdout + r.stderr)
        try:
            rewards = verifier.read_rewards(sb)
        except verifier.BadReward as e:
            return None, dict(extra, sandbox_broken=True,
                              error=f"{e} (verifier exit {r.exit_code}; its output is in "
                                    f"{TEST_STDOUT})")
        return rewards, extra

    @staticmethod
    def _tail(sb: Any, path: str) -> str:
        """The last few KiB of a log file in the container ('' when there is none)."""
        try:
            data = verifier.read_small(sb, path, limit=64 << 20)
        except Exception:  # a log is shown on a best-effort basis
            return ""
        return (data or b"")[-OUTPUT_TAIL:].decode("utf-8", "replace")

    def _judge_failed(self, e: Exception) -> tuple[float | None, dict[str, float],
                                                   dict[str, Any]]:
        """A verifier that outlives its deadline on the pristine image too is the task's
        failing, whatever state the agent's container is in: an infrastructure error."""
        if isinstance(e, _TasksTooSlow):
            return None, {}, {"error": f"the verifier could not run: {e}"}
        return super()._judge_failed(e)

    def _pristine_times_out(self, timeout: float) -> bool:
        """Whether test.sh outlives `timeout` in a fresh container of the task's image, where
        nothing of the agent's is (finding 7: a verifier past its deadline in a container
        the agent changed is an infrastructure error only when it is so without the agent)."""
        vsb = self._verifier_container(pool="harbor-pristine")
        try:
            judge.docker_exec(vsb, ["chmod", "+x", "/tests/test.sh"], user="0", timeout=60)
            env = {"PATH": container.container_path(vsb), **self._verifier_env()}
            r = judge.docker_exec(vsb, ["bash", "-c", f"(/tests/test.sh) > {TEST_STDOUT} 2>&1"],
                                  user=self._run_user("verifier_user"), cwd=vsb.workdir,
                                  env=env, timeout=timeout,
                                  on_timeout=lambda: vsb.container.kill())
            return r.timed_out
        finally:
            vsb.close()

    # -- the oracle ---------------------------------------------------------------------
    def reference_action(self) -> str | None:
        """The oracle's next action: the step's (or task's) solution, then `<done/>`. The
        solution's action carries a one-time token: `step` runs it as Harbor's oracle does
        (module docstring) instead of typing it into the shell."""
        if self.task is None:
            return None
        if self._solution_dir() is not None and not self._reference_sent:
            self._reference_sent = True
            self._oracle_action = (f"<bash>/solution/solve.sh > {ORACLE_LOG} 2>&1 "
                                   f"# skyhub oracle {secrets.token_hex(8)}</bash>")
            return self._oracle_action
        return "<done/>"

    def _solution_dir(self) -> Path | None:
        """The step's solution/ (when it has one, Harbor uses it even without solve.sh),
        else the task's; None when there is no solve.sh to run."""
        steps = self._steps()
        where = steps[self._step] if steps else self._cfg
        d = where.get("solution_dir")
        if d is None or not (Path(d) / "solve.sh").is_file():
            return None
        return Path(d)

    def _oracle_step(self) -> StepResult:
        self.next_turn()
        sb, solution = self._sandbox, self._solution_dir()
        assert solution is not None
        if self._shell is not None:  # nothing of a shell of the agent's runs beside it
            self._shell.close()
            self._shell = None
        _put_dir(sb.container, solution, "solution")
        judge.docker_exec(sb, ["chmod", "+x", "/solution/solve.sh"], user="0", timeout=60)
        env = {"DEBIAN_FRONTEND": "noninteractive",
               **resolve_env(dict(self._cfg.get("solution_env") or {}), task=self.task.id)}
        left = max(self._deadline - time.monotonic(), 1.0)
        r = judge.docker_exec(sb, ["bash", "-c", f"(/solution/solve.sh) > {ORACLE_LOG} 2>&1"],
                              user=self._run_user("agent_user"), cwd=sb.workdir, env=env,
                              timeout=left, on_timeout=lambda: judge.kill_processes(sb))
        log = self._tail(sb, ORACLE_LOG)
        status = "timed out" if r.timed_out else f"exit {r.exit_code}"
        obs = f"<output>\n{log.rstrip()}\n</output>\n[solve.sh: {status}] {sb.workdir}"
        try:
            self._shell = ShellSession(sb, max_output=self.max_output)
        except InfraError as e:
            return self._sandbox_lost(obs, e)
        if r.timed_out or time.monotonic() > self._deadline:
            return self._verify(obs, ended_by="timeout")
        if self.out_of_turns:
            return self._verify(obs, ended_by="max_turns")
        return obs, 0.0, False, False, self.make_info(oracle_exit_code=r.exit_code)


class _TasksTooSlow(InfraError):
    """test.sh outlived its timeout in a fresh container of the task's image too."""


MAX_LOGS_BYTES = 64 << 20
_logs_root: list[Path] = []


def _default_logs_dir() -> Path:
    import tempfile

    if not _logs_root:
        _logs_root.append(Path(tempfile.mkdtemp(prefix="skyhub-harbor-logs-")))
    return _logs_root[0]


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in text)[:100] or "task"


def _why(info: dict[str, Any]) -> str | None:
    """One line: why an episode did not succeed (None when it did)."""
    if info.get("outcome") == "success":
        return None
    logs = info.get("logs")
    where = f" (logs: {logs})" if logs else ""
    if info.get("error"):
        first = str(info["error"]).strip().splitlines()
        return (first[0] if first else "error") + where
    log = f" (output: {logs}/verifier/test-stdout.txt)" if logs else ""
    if info.get("verifier_exit_code") is not None:
        reward = (info.get("reward_breakdown") or {}).get("reward")
        got = f"reward {reward:g}" if isinstance(reward, int | float) else "no full reward"
        return f"the verifier exited {info['verifier_exit_code']} with {got}{log}"
    return None


_SHELL_CMDS = ("script -qfec bash --noprofile --norc -i /dev/null",
               "sh -c bash --noprofile --norc -i", "bash --noprofile --norc -i")


def _left_running(sb: Any) -> list[str]:
    """The command lines of the processes the agent left in its container (Docker's `top`,
    run by the host: nothing in the container is executed), less pid 1, its init, skyhub's
    guest and the agent's interactive shell itself (session.py's `script` + `bash -i`)."""
    try:
        top = sb.container.top(ps_args="-o pid,args")
    except Exception:  # stopped, or Docker cannot say: nothing to report
        return []
    cmds = []
    for row in top.get("Processes") or []:
        cmd = str(row[-1]) if row else ""
        if not cmd or "/opt/skyhub/" in cmd or cmd in _SHELL_CMDS or cmd.startswith(
                ("sleep infinity", "/sbin/docker-init", "/dev/init", "docker-init")):
            continue
        cmds.append(cmd[:120])
    return cmds


def _parents(path: str) -> list[str]:
    """'/a/b' -> ['a', 'a/b'] (archive member names for put_archive at '/')."""
    parts = [p for p in path.split("/") if p]
    return ["/".join(parts[:i + 1]) for i in range(len(parts))]


def _renamed(data: bytes, old: str, new: str) -> bytes:
    """A tar whose top-level member `old` (and what is under it) is named `new`."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, \
            tarfile.open(fileobj=out, mode="w") as tar:
        for m in src:
            if not (m.isreg() or m.isdir()):  # data only: no link leads a member elsewhere
                continue
            f = src.extractfile(m) if m.isreg() else None
            m.mode &= 0o1777
            m.name = new + m.name[len(old):] if m.name.startswith(old) else m.name
            tar.addfile(m, f)
    return out.getvalue()


__all__ = ["EXAMPLES", "REWARD_JSON", "REWARD_TXT", "HarborEnv"]
