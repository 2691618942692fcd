"""`HarborEnv`: Harbor tasks, step by step, in their own containers, run as Harbor runs them.

reset builds the task's image (image.py: BuildKit, the compose file's main service, cached by
content), starts a container from it as Harbor's Docker environment does (container.py: root
with Docker's default capabilities, the task's network mode, env, workdir, /logs, the
healthcheck awaited), and a shell for the agent as `[agent] user`; the observation is
instruction.md. The episode ends at `<done/>`, `max_turns` or the agent's `timeout_sec`; then
the verifier runs (verifier.py) and the reward is read from /logs/verifier/reward.json (any
object of named rewards: all go to `reward_breakdown` and `info["rewards"]`), else
reward.txt. The episode's reward is `reward`, else the only value, else `reward_key=` when the
verdict has that name, else the dataset's rule (`reward_rule=` or dataset.toml's
`[skyhub.reward]`): rewards.py, which says what Harbor's metrics do with several names.

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

The compose file's services besides `main` (sidecars.py) are started before the agent's
container, on a network of the episode's own where the service names are hostnames, healthy
as `docker compose up --wait` leaves them; every reset starts new ones and removes the last
episode's, and close removes them. Only `isolation="harbor"` runs them.

The verifier phases (where test.sh runs, the rewards it leaves, the steps' aggregate) are
verdict.py's `VerdictPhases`, a mixin of `HarborEnv`.

Over ~400 lines, for a reason: the rest of one episode flow (container, agent, oracle, steps,
logs), each phase short; split further, a reader would jump between files to follow an
episode.
"""

from __future__ import annotations

import io
import posixpath
import secrets
import tarfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from skyhub.env import StepResult, clip_text
from skyhub.errors import InfraError, SandboxUnavailable, UsageError
from skyhub.sandbox.extract import extract
from skyhub.shell import judge
from skyhub.shell.env import ShellEnv
from skyhub.shell.session import ShellSession

from . import container, rewards, sidecars, verifier
from .compose import compose_variables
from .final_state import finish as save_verdict
from .final_state import task_slug
from .image import task_image
from .registry import load_dataset
from .task import resolve_env
from .verdict import VerdictPhases, logs_archive
from .verifier import REWARD_JSON, REWARD_TXT

EXAMPLES = Path(__file__).parent / "data" / "examples"
ORACLE_LOG = "/logs/agent/oracle.txt"


def _put_dir(container_: Any, src: Path, name: str) -> None:
    """Copy a host directory to /<name> in the container, owned by root (through the
    daemon, so it works whatever the image's user)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(src, arcname=name, filter=lambda i: (setattr(i, "uid", 0), setattr(i, "gid", 0),
                                                      i)[-1])
    container_.put_archive("/", buf.getvalue())


class HarborEnv(VerdictPhases, ShellEnv):
    """Kwargs: `data_dir` (a Harbor task or dataset directory, or a Terminal-Bench one, or
    "NAME@VERSION" of a registry dataset, registry.py; required), `registry` (the Harbor
    registry.json, a path or URL, that resolves "NAME@VERSION"; default
    $SKYHUB_HARBOR_REGISTRY, else Harbor's), `include` and `exclude` (globs over task names,
    a list or "a*,b*": Harbor's --task-name and --exclude-task-name), `max_turns`,
    `command_timeout_s` (per agent command),
    `max_tool_calls` and `turn_timeout_s` (per turn, as for `terminal`:
    `skyhub.shell.env.ShellEnv`), `max_output`, `isolation` ("harbor": as Harbor runs tasks;
    "training": skyhub's stricter sandbox), `reward_key` (which named reward of reward.json is
    the episode's reward, when it has several and no `reward`; a verdict without that name
    falls through to the next rule), `reward_rule` ("mean" or {name: weight}: the scalar of
    a verdict of several names that neither `reward` nor `reward_key` decides; default
    dataset.toml's `[skyhub.reward]`, rewards.py), `allowlist` ("no-network" or
    "public": how to run a task whose network_mode is "allowlist", which skyhub cannot
    enforce), `logs_dir` (where each episode's /logs is saved, as Harbor keeps a trial's
    logs: `<logs_dir>/<task>/<n>/{agent,verifier,artifacts}`; default a temporary directory,
    kept), `verifier_paths` (under `isolation="training"`: more directories the tests read
    the agent's results from, besides the workdir and artifacts; never a system tree),
    `save_final_state` (a folder: each episode's changed data roots and verdict are saved
    there for `skyhub harbor reverify`, reverify.py; the episode's info names them),
    `protocol` ("tags" or "tools": the system prompt describes `<bash>`/`<done/>` or the
    `bash`/`done` tools; both are accepted in `step`). Docker only: a Harbor task is its
    Docker image."""

    # the oracle's one-time token (reference_action) differs between two plays
    replay_ignore = (r"# skyhub oracle [0-9a-f]{16}",)

    def __init__(self, *, data_dir: str | Path | None = None, max_turns: int = 50,
                 command_timeout_s: float = 60.0, max_output: int = 16384,
                 max_tool_calls: int = 8, turn_timeout_s: float | None = None,
                 isolation: str = "harbor", reward_key: str | None = None,
                 reward_rule: str | dict[str, float] | None = None,
                 allowlist: str | None = None, logs_dir: str | Path | None = None,
                 verifier_paths: list[str] | tuple[str, ...] = (),
                 registry: str | Path | None = None, include: str | list[str] | None = None,
                 exclude: str | list[str] | None = None,
                 save_final_state: str | Path | None = None, protocol: str = "tags") -> None:
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
        tasks, data_dir = load_dataset(data_dir, registry=registry, include=include,
                                       exclude=exclude)
        super().__init__(tasks=tasks, backend="docker", max_turns=max_turns,
                         command_timeout_s=command_timeout_s, max_output=max_output,
                         max_tool_calls=max_tool_calls, turn_timeout_s=turn_timeout_s,
                         protocol=protocol)
        self.isolation, self.reward_key, self.allowlist = isolation, reward_key, allowlist
        self.reward_rule = (rewards.check_rule(reward_rule, where="reward_rule=")
                            if reward_rule is not None else rewards.declared_rule(data_dir))
        self.logs_dir = Path(logs_dir).expanduser() if logs_dir is not None else None
        self._episodes = 0
        self.save_final_state = (Path(save_final_state).expanduser().resolve()
                                 if save_final_state not in (None, "") else None)
        self._pending_state: dict[str, Any] | None = None
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
        self._sidecars: sidecars.Sidecars | None = None  # this episode's compose services

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
        self._pending_state = None
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
        self._close_sidecars()
        cfg = task.meta["config"]
        container.refuse_unsupported(cfg, task.id)
        env_cfg = cfg["environment"]
        network = self._network(task)
        services, main_deps = self._sidecar_specs(task, env_cfg)
        client = get_client()
        image = self._main_image(task, client)
        self._image_user = image.user or (client.images.get(image.tag).attrs.get(
            "Config", {}).get("User") or "0")
        services = [replace(svc, image=task_image(  # `build` sidecars: built as main is
            task.meta["path"], {**{k: v for k, v in env_cfg.items() if k != "docker_image"},
                                "build_dir": str(svc.build_dir)}, client,
            build_timeout_s=cfg.get("build_timeout_s")).tag) if svc.build_dir else svc
            for svc in services]
        if services:  # started first: main's depends_on, as `docker compose up` does
            from skyhub.sandbox.base import owner_labels

            self._sidecars = sidecars.Sidecars(client, task_id=task.id,
                                               labels=owner_labels(sidecars.POOL))
            try:
                self._sidecars.start(services, main_deps, public=network, env_cfg=env_cfg)
            except BaseException:
                self._close_sidecars()
                raise
        try:
            self._sandbox = self._task_container(task, image, network, client)
        except BaseException:
            self._close_sidecars()
            raise
        try:
            if self._sidecars is not None and network:
                self._sidecars.join(self._sandbox.container)
            container.await_healthy(self._sandbox, env_cfg.get("healthcheck"),
                                    user=str(self._image_user), task_id=task.id)
            self._setup_step(task)
        except BaseException:
            self._sandbox.close()
            self._sandbox = None
            self._close_sidecars()
            raise
        return self._sandbox

    def _network(self, task: Any) -> bool:
        """Whether the task's main container gets a network (task.toml, the isolation)."""
        cfg = task.meta["config"]
        return container.network_on(cfg["environment"], isolation=self.isolation,
                                    allowlist=self.allowlist, task_id=task.id,
                                    phase_mode=cfg.get("agent_network_mode"))

    def _main_image(self, task: Any, client: Any) -> Any:
        """The task's main image, built when it is not there yet."""
        cfg = task.meta["config"]
        return task_image(task.meta["path"], cfg["environment"], client,
                          build_timeout_s=cfg.get("build_timeout_s"))

    def _task_container(self, task: Any, image: Any, network: bool, client: Any) -> Any:
        """The task's main container for the current step, not yet healthy."""
        env_cfg = task.meta["config"]["environment"]
        return container.start_task_container(
            image, env_cfg,
            user=None if (user := self._phase("agent_user")) is None else str(user),
            env=resolve_env(env_cfg.get("env") or {}, task=task.id),
            isolation=self.isolation, network=network, client=client)

    # -- forking: into spare containers of the task's image ------------------------------
    def _new_sandbox(self) -> Any:
        """A spare for forks (`ShellEnv.fork`): the current task's container as `_prepare`
        starts it, healthy; the episode's files come from the parent's changes (its step's
        setup among them)."""
        from skyhub.sandbox.docker_client import get_client

        task = self.task
        assert task is not None
        client = get_client()
        sb = self._task_container(task, self._main_image(task, client), self._network(task),
                                  client)
        try:
            container.await_healthy(sb, task.meta["config"]["environment"].get("healthcheck"),
                                    user=str(self._image_user), task_id=task.id)
        except BaseException:
            sb.close()
            raise
        return sb

    def _spares_key(self) -> Any:
        return (self.task.id if self.task is not None else None, self._step)

    def sandbox_fork_problem(self, spare: Any) -> str | None:
        """Sidecars are not copied; nor is a process the agent or the step's setup left
        running (Docker's `top`, compared with the spare's: the image's own services run in
        both). Either way the fork replays, which starts them again."""
        from .verdict import running_services

        if self._sidecars is not None:
            return "the task runs sidecar services, which a sandbox copy does not carry"
        if spare is None:
            return None
        facts = self.spares().facts  # a spare's services: read once, all spares are alike
        if "services" not in facts:
            facts["services"] = set(running_services(spare.sandbox).values())
        extra = sorted(set(running_services(self._sandbox).values()) - facts["services"])
        if extra:
            return f"processes are running that a copy would not have: {', '.join(extra[:3])}"
        return None

    def fork_resources(self) -> None:
        super().fork_resources()
        self._step_rewards, self._step_extra = list(self._step_rewards), list(self._step_extra)
        self._pending_state = dict(self._pending_state) if self._pending_state else None

    def _sidecar_specs(self, task: Any, env_cfg: dict[str, Any]
                       ) -> tuple[list[sidecars.Sidecar], dict[str, str]]:
        """The compose file's services besides main (sidecars.py); refused under the
        training isolation, whose agent container has no network to reach them through."""
        build_dir = Path(env_cfg.get("build_dir") or Path(task.meta["path"]) / "environment")
        services, main_deps = sidecars.read(build_dir, compose_variables(
            build_dir, env_cfg, main_image_name=f"skyhub-harbor/{task_slug(task.id).lower()}"))
        if services and self.isolation == "training":
            raise UsageError(f"Harbor task {task.id} starts sidecar services "
                             f"({', '.join(s.name for s in services)}); isolation='training' "
                             "gives the agent's container no network to reach them through: "
                             "run it with isolation='harbor'")
        return services, main_deps

    def _close_sidecars(self) -> None:
        running = getattr(self, "_sidecars", None)  # close() after a failed __init__ too
        if running is not None:
            running.close()
            self._sidecars = None

    def close(self) -> None:
        super().close()
        self._close_sidecars()

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
            if self._pending_state is not None:
                save_verdict(self, self._pending_state, result[1], info)
                self._pending_state = None
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
        dest = root / task_slug(self.task.id) / f"{self._episodes:04d}-{secrets.token_hex(3)}"
        try:
            data, _ = logs_archive(sb, "/logs")  # a cut archive keeps what came whole
            extract(data, dest, prefix="logs")  # the no-follow extractor, never tarfile's
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

    def expected_answer(self) -> dict[str, Any] | None:
        """What a run records as the expected answer: the task's `solution/` directory
        (`solution`, None without one), its solve.sh (`script`, clipped) and, for a
        multi-step task, each step's solve script path (`steps`)."""
        if self.task is None:
            return None
        path = self.task.meta.get("path")
        d = Path(path) / "solution" if isinstance(path, str) and path else None
        out: dict[str, Any] = {"solution": str(d) if d is not None and d.is_dir() else None,
                               "script": clip_text(str(self.task.answer))
                               if self.task.answer else None}
        steps = (self.task.meta.get("config") or {}).get("steps") or []
        if steps:
            out["steps"] = [s.get("solve_path") for s in steps if isinstance(s, dict)]
        return out

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


_logs_root: list[Path] = []


def _default_logs_dir() -> Path:
    import tempfile

    if not _logs_root:
        _logs_root.append(Path(tempfile.mkdtemp(prefix="skyhub-harbor-logs-")))
    return _logs_root[0]


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


__all__ = ["EXAMPLES", "REWARD_JSON", "REWARD_TXT", "HarborEnv"]
