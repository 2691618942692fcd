"""How a Harbor episode gets its verdict: the verifier run where the task says, the rewards.

`VerdictPhases` is the part of `HarborEnv` (env.py) that runs after the agent: the step's (or
task's) tests/test.sh run where `[verifier]` puts it, `verifier_mode = "shared"` (in the
agent's container under `isolation="harbor"`, as Harbor does; in a fresh container of the
task's image holding the agent's results as data under `isolation="training"`) or
"separate" (a container of its own, built from tests/, with the task's artifacts); then the
rewards it left, per step, and the episode's reward from them. The lower-level pieces (the
reward files, the filtered copy of data roots, /tests) are verifier.py's.

Who is to blame follows env.py's module docstring: a verifier past its `timeout_sec` is the
agent's failing unless test.sh also outlives it on the task's pristine image
(`_pristine_times_out`), which is the task's: an infrastructure error.

A mixin of `HarborEnv` (env.py), which owns the episode's state it reads: `task`,
`_sandbox`, `_cfg`, `_steps()`, `_phase()`, `_run_user()`, `isolation`, `allowlist`,
`reward_key`, `reward_rule`, `verifier_paths`, `save_final_state`, `_pending_state`,
`_step`, `_step_rewards`, `_step_extra`, `_verified`,
`_failed`, `_image_user`, `_broken`.

Over ~400 lines, for a reason: the three places a verifier runs share the verifier's
container, the test script's run and the blame rule; split, each would read the others.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import tarfile
import time
from pathlib import Path
from typing import Any

from skyhub.errors import InfraError
from skyhub.shell import judge
from skyhub.shell.session import BASH

from . import container, verifier
from . import rewards as named
from .image import task_image
from .task import resolve_env

TEST_STDOUT = "/logs/verifier/test-stdout.txt"
OUTPUT_TAIL = 4000
MAX_LOGS_BYTES = 64 << 20


class _TasksTooSlow(InfraError):
    """test.sh outlived its timeout in a fresh container of the task's image too."""


class VerdictPhases:
    """The verifier phases of `HarborEnv` (see the module docstring)."""

    def _judge(self) -> tuple[float | None, dict[str, float], dict[str, Any]]:
        """The verdict (`_verdict`); a verifier that outlives its deadline on the
        pristine image too is the task's failing, whatever state the agent's container
        is in: no reward, an infrastructure error."""
        try:
            return self._verdict()
        except _TasksTooSlow as e:
            return None, {}, {"error": f"the verifier could not run: {e}"}

    def _verdict(self) -> tuple[float | None, dict[str, float], dict[str, Any]]:
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
            return self._scalar(rewards, extra), dict(rewards), extra
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
        return self._scalar(rewards, extra), {**rewards, **breakdown}, extra

    def _scalar(self, rewards: dict[str, float], extra: dict[str, Any]) -> float:
        """The episode's reward from its named rewards (rewards.py's rule order), with every
        name in `extra["rewards"]` and the rule used in `extra["reward_rule"]`. No rule
        applies: the mean of the names, flagged as undeclared with what to declare
        (`extra["reward_note"]`), in both isolations; never an error (in a vector env or a
        trainer an exception would make every such episode an infra error)."""
        assert self.task is not None
        value, how = named.scalar(rewards, self.reward_key, self.reward_rule)
        extra["rewards"] = dict(rewards)
        if value is None:
            value, how = sum(rewards.values()) / len(rewards), named.UNDECLARED
            extra["reward_note"] = named.undeclared(rewards, self.task.id)
        extra["reward_rule"] = how
        return value

    def _verify_step(self) -> None:
        """Run the current step's (or the task's) verifier and record its rewards (None: it
        left none it could be scored by) and what it said. InfraError when Docker failed."""
        import docker.errors
        import requests.exceptions

        if self.save_final_state is not None and self._pending_state is None:
            from .final_state import save_roots

            self._pending_state = save_roots(self, self.save_final_state) \
                if not self._steps() else {"error": "a multi-step task's state is not saved "
                                                    "(reverify runs one verifier)"}
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
        from skyhub.sandbox.docker_client import get_client

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
                verifier.freeze(sb.container)
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
        data, whole = logs_archive(src, "/logs/verifier")
        if whole:
            dest.container.put_archive("/logs", data)

    def _run_separate(self) -> tuple[dict[str, float] | None, dict[str, Any]]:
        """The verifier in a container of its own (`[verifier] environment_mode =
        "separate"`): built from tests/ (the step's, if it has one), holding only the
        artifacts the task lists and /logs/artifacts, copied from the agent's container."""
        from skyhub.sandbox.docker_client import get_client

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

    def _pristine_times_out(self, timeout: float) -> bool:
        """Whether test.sh outlives `timeout` in a fresh container of the task's image, where
        nothing of the agent's is (a verifier past its deadline in a container
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


_SHELL_CMDS = (f"script -qfec {BASH} /dev/null", f"sh -c {BASH}", BASH)


def _left_running(sb: Any, settle_s: float = 0.5) -> list[str]:
    """The command lines of the processes the agent left in its container (Docker's `top`,
    run by the host: nothing in the container is executed), less pid 1, its init, skyhub's
    guest, the agent's interactive shell itself (session.py's `script` + `bash -i`) and
    zombies. A process is only counted when it is still there `settle_s` later: the last
    command's children may still be exiting when the episode ends (a `tar` whose `gzip` has
    not been reaped yet on a loaded machine), and they are no service."""
    first = running_services(sb)
    if not first:
        return []
    time.sleep(settle_s)
    still = running_services(sb)
    return [cmd for pid, cmd in first.items() if still.get(pid) == cmd]


def running_services(sb: Any) -> dict[str, str]:
    """{pid: command line} of the agent's container's live processes that could be
    services (see `_left_running`); {} when Docker cannot say (a stopped container)."""
    try:
        top = sb.container.top(ps_args="-o pid,stat,args")
    except Exception:  # stopped, or Docker cannot say: nothing to report
        return {}
    found: dict[str, str] = {}
    for row in top.get("Processes") or []:
        if not row or len(row) < 3:
            continue
        pid, state, cmd = str(row[0]), str(row[1]), str(row[-1])
        if not cmd or state.startswith("Z") or "/opt/skyhub/" in cmd or cmd in _SHELL_CMDS \
                or cmd.startswith(("sleep infinity", "/sbin/docker-init", "/dev/init",
                                   "docker-init")):
            continue
        found[pid] = cmd[:120]
    return found


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


def logs_archive(sb: Any, path: str) -> tuple[bytes, bool]:
    """Docker's tar of `path` in a sandbox's container, read up to `MAX_LOGS_BYTES`: (the
    bytes read, whether that is the whole archive). The agent decides how much it wrote."""
    stream, _ = sb.container.get_archive(path)
    buf, size = io.BytesIO(), 0
    for chunk in stream:
        size += len(chunk)
        if size > MAX_LOGS_BYTES:
            return buf.getvalue(), False
        buf.write(chunk)
    return buf.getvalue(), True


__all__ = ["MAX_LOGS_BYTES", "OUTPUT_TAIL", "TEST_STDOUT", "VerdictPhases", "logs_archive",
           "running_services"]
