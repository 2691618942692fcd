"""`SWEEnv`: a repository task in a sandbox, graded by the repository's own tests.

    env = skyhub.make("swe", data_dir="instances.jsonl", repos="repos/")

The episode is the shell family's (`skyhub.shell.env.ShellEnv`: a persistent bash, turn and
time budgets, who is to blame when something breaks) with the repository at `/testbed` and
SWE-bench's task: the problem statement. Besides `<bash>` the agent has the file editor
(`skyhub.envs.swe.editor`, as `<edit>` tags or the `str_replace_editor` tool:
`skyhub.envs.swe.protocol`); `<done/>` ends the episode.

A reset restores `/testbed` from a snapshot of the repository at the instance's base commit
(made once per repository and commit), writes the task's bug (generated tasks), and commits
it all as one fresh commit (`skyhub.envs.swe.workspace`).

The verdict is computed where nothing the agent left can act: its processes are killed, its
`/testbed` is copied out of the sandbox and compared with the start on the host, the sandbox
is restored to the start (files and processes), the agent's changes are written back except
those to tests, test configuration and start-up hooks (`workspace.is_protected`), the test
patch is applied, the tests run in a fresh process, and the `swebench` package grades the
log (`grading`). Rewards: `resolved` (1 or 0, as SWE-bench) or `localization` (CodeScout's
F1s of the named or edited locations against the gold patch's), chosen with `reward=`; both
are in `reward_breakdown`.
"""

from __future__ import annotations

import shlex
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

from skyhub.env import StepResult
from skyhub.errors import DataNotFound, InfraError, UsageError
from skyhub.shell import judge
from skyhub.shell.env import ShellEnv
from skyhub.task import Task, TaskSet

from . import localization, protocol
from .diffs import parse_patch
from .editor import Editor
from .errors import EditorError
from .grading import eval_log, grade
from .instances import Instance, load_instances
from .synth import PYTEST
from .workspace import (
    MAX_FILE_BYTES,
    MAX_TREE_BYTES,
    TESTBED,
    Workspace,
    export,
    find_repository,
    read_tree,
    testbed_sandbox,
)

REWARDS = ("resolved", "localization")
#: the environment the tests run with: no user site, no stray bytecode
TEST_ENV = {"PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
GIT = "git -c user.name=skyhub -c user.email=skyhub@localhost -c commit.gpgsign=false"
GIT_COMMIT = f"git init -q && git add -A && {GIT} commit -q --no-verify -m 'the task'"

SYSTEM_PROMPT = (
    "You are fixing a software repository at /testbed, in a Linux shell (bash) with no "
    "network. Each turn, do one of these:\n"
    "- run commands: <bash>...</bash> (you see their output, exit status and the working "
    "directory; each may run for {timeout:g} seconds);\n"
    "- use the file editor: <edit><command>view|create|str_replace|insert|undo_edit</command>"
    "<path>/absolute/path</path> and, as the command needs, <file_text>, <old_str>, <new_str>, "
    "<insert_line> or <view_range> (first last)</edit>; str_replace needs old_str to occur "
    "exactly once;\n"
    "- finish: <done/>. The repository's tests then decide (the tests themselves are "
    "restored first, so change the code, not the tests).\n"
    "You have {max_turns} turns."
)
TOOLS_SYSTEM_PROMPT = (
    "You are fixing a software repository at /testbed, in a Linux shell with no network. "
    "Call `bash` to run commands (each may run for {timeout:g} seconds), "
    "`str_replace_editor` to view and edit files (absolute paths; str_replace needs old_str "
    "to occur exactly once), and `done` when the fix is complete: the repository's tests "
    "then decide (the tests themselves are restored first, so change the code, not the "
    "tests). Each tool call is one turn; you have {max_turns} turns."
)


class SWEEnv(ShellEnv):
    """Kwargs: `data_dir` (a SWE-bench-format file or directory: `instances`) or `instances`
    (a list of `Instance`), or `synth=True` (swe-synth's tasks, from
    `$SKYHUB_DATA/swe-synth`: `skyhub swe data get swe-synth`); `repos` (where the
    repositories are: `workspace`; default `data_dir`'s folder, or the `repos/` folder in
    it), `reward` ("resolved" or "localization"), `test_command` (run in /testbed; default
    the instance's `test_cmd`, else `pytest -rA` on the test files its test names and test
    patch name), `test_timeout_s`, and the shell family's `backend`, `image` (docker; default
    the instance's `image_name`, else skyhub's `swe` image: Debian's Python, pytest and
    git; a new sandbox is made when the next instance names another image), `max_turns`,
    `command_timeout_s`, `max_tool_calls`, `turn_timeout_s`, `max_output`, `cpus`,
    `memory_mb`, `protocol` ("tags" or "tools")."""

    stop_strings = (*ShellEnv.stop_strings, "</edit>")
    tools = protocol.TOOLS
    # the sandbox is /testbed's (its image, the base's snapshots, the editor's undo history
    # over it), not what `_new_sandbox` makes: a fork replays the episode into a fresh env
    fork_by_sandbox = False

    def __init__(self, *, data_dir: str | Path | None = None,
                 instances: list[Instance] | None = None, synth: bool = False,
                 repos: str | Path | None = None,
                 reward: str = "resolved", test_command: str | None = None,
                 test_timeout_s: float = 900.0, backend: str = "auto", image: str | None = None,
                 max_turns: int = 50, command_timeout_s: float = 120.0,
                 max_output: int = 16384, cpus: float = 1.0, memory_mb: int = 2048,
                 max_tool_calls: int = 8, turn_timeout_s: float | None = None,
                 protocol: str = "tags") -> None:
        if synth and data_dir is None and instances is None:
            data_dir = _synth_data()
        if (data_dir is None) == (instances is None):
            raise UsageError("pass data_dir=PATH (SWE-bench-format .json/.jsonl/.parquet "
                             "instances) or instances=[...], one of them")
        if reward not in REWARDS:
            raise UsageError(f"reward must be one of {REWARDS}, not {reward!r}")
        if instances is None:
            assert data_dir is not None
            instances = load_instances(data_dir)
            if repos is None:  # the data's folder, or its repos/ folder
                here = Path(data_dir) if Path(data_dir).is_dir() else Path(data_dir).parent
                repos = here / "repos" if (here / "repos").is_dir() else here
        if repos is None:
            raise UsageError("pass repos=DIR: where the instances' repositories are "
                             "(<owner>__<name>/ or <owner>__<name>.tar.gz)")
        if not instances:
            raise DataNotFound("no SWE-bench instances to run")
        self.instances = {i.instance_id: i for i in instances}
        self.repos, self.reward_name = Path(repos), reward
        self.test_command, self.test_timeout = test_command, float(test_timeout_s)
        tasks = TaskSet([_task(i) for i in instances], name="swe")
        super().__init__(tasks=tasks, backend=backend, image=image, max_turns=max_turns,
                         command_timeout_s=command_timeout_s, max_output=max_output, cpus=cpus,
                         memory_mb=memory_mb, max_tool_calls=max_tool_calls,
                         turn_timeout_s=turn_timeout_s, protocol=protocol)
        prompt = TOOLS_SYSTEM_PROMPT if self.protocol == "tools" else SYSTEM_PROMPT
        self.system_prompt = prompt.format(timeout=command_timeout_s, max_turns=max_turns)
        self._bases: OrderedDict[tuple[str, str], dict[str, bytes]] = OrderedDict()
        self._snaps: dict[tuple[str, str], Any] = {}
        self._hot: dict[tuple[str, str], list[str]] = {}  # see `_index`
        self._keys: dict[str, tuple[str, str]] = {}
        self._image_now: str | None = None  # the image the sandbox was made from
        self._workspace: Workspace | None = None
        self._editor: Editor | None = None
        self._last_action = ""
        #: the last verdict's test log, whole, as SWE-bench's eval script writes it
        self.last_test_log = ""

    # -- the repository ----------------------------------------------------------------
    @property
    def instance(self) -> Instance:
        assert self.task is not None, "call reset() first"
        return self.instances[self.task.id]

    def _key(self, inst: Instance) -> tuple[str, str]:
        """(where its repository is, its base commit): what a snapshot is made for."""
        if inst.instance_id not in self._keys:
            self._keys[inst.instance_id] = (str(find_repository(self.repos, inst.repo)),
                                            inst.base_commit)
        return self._keys[inst.instance_id]

    def _base(self, inst: Instance) -> dict[str, bytes]:
        """The repository's files at the base commit, read once (the last few kept)."""
        key = self._key(inst)
        if key not in self._bases:
            with tempfile.TemporaryDirectory(prefix="skyhub-swe-") as tmp:
                export(Path(key[0]), inst.base_commit, Path(tmp))
                self._bases[key] = read_tree(Path(tmp))
            while len(self._bases) > 4:
                self._bases.popitem(last=False)
        self._bases.move_to_end(key)
        return self._bases[key]

    def _prepare(self, task: Task) -> Any:
        """`/testbed` at the task's start, committed; the agent's editor over it."""
        inst = self.instances[task.id]
        self._workspace = Workspace(self._base(inst), str(inst.extra.get("bug_patch") or ""),
                                    inst.test_patch)
        sb = self._start(inst)
        hot = self._hot[self._key(inst)]
        add = f"git add -A -- {' '.join(shlex.quote(p) for p in hot)} && " if hot else ""
        r = sb.exec(f"{add}{GIT} commit -q --no-verify -m 'the task'", timeout=300, cwd=TESTBED)
        if not r.ok:
            raise InfraError(f"{task.id}: could not commit /testbed (exit {r.exit_code}; does "
                             f"the image have git?): {(r.stderr or r.stdout)[-300:]}")
        self._editor = Editor(sb, TESTBED)
        self._last_action = ""
        return sb

    def _start(self, inst: Instance) -> Any:
        """The env's sandbox with `/testbed` holding the base files (restored from their
        snapshot, made on first use) and the task's bug written over them."""
        image = self.image or (inst.image_name if self.backend != "local" else None)
        if self._sandbox is not None and (self._sandbox.closed or image != self._image_now):
            self._discard_sandbox()  # lost, or another instance's environment image
            self._sandbox, self._snaps = None, {}
        if self._sandbox is None:
            self._sandbox = testbed_sandbox(self.backend, image, cpus=self.cpus,
                                            memory_mb=self.memory_mb, pool="swe")
            self._clean, self._image_now = self._sandbox.snapshot(), image
        sb, key = self._sandbox, self._key(inst)
        if key in self._snaps:
            sb.restore(self._snaps[key], kill_processes=True)
        else:
            sb.restore(self._clean, kill_processes=True)
            with tempfile.TemporaryDirectory(prefix="skyhub-swe-") as tmp:
                Workspace(self._base(inst)).write(Path(tmp))
                sb.upload(tmp, TESTBED)
            self._index(sb, key)
            self._snaps[key] = sb.snapshot()
        assert self._workspace is not None
        for path, data in self._workspace.bug.items():
            _put(sb, path, data)
        return sb

    def _index(self, sb: Any, key: tuple[str, str]) -> None:
        """Stage the base files in a new git repository at /testbed, all but the "hot" ones
        (those a task's bug changes, in any instance of this repository and commit), and
        keep it in the snapshot: a reset then stages only the hot files and commits. No
        blob of a hot file's original text is ever written, so the agent cannot read a
        fix out of git's objects (`git cat-file`, `git fsck --lost-found`)."""
        hot = sorted({fd.path for i in self.instances.values() if self._key(i) == key
                      for fd in parse_patch(str(i.extra.get("bug_patch") or ""))})
        self._hot[key] = hot
        excluded = " ".join(shlex.quote(f":(exclude){p}") for p in hot)
        r = sb.exec(f"git init -q && git add -A -- . {excluded}", timeout=600, cwd=TESTBED)
        if not r.ok:
            raise InfraError(f"could not make a git repository in /testbed (exit "
                             f"{r.exit_code}; does the image have git?): "
                             f"{(r.stderr or r.stdout)[-300:]}")

    # -- turns -------------------------------------------------------------------------
    def _turn(self, action: str) -> StepResult:
        self._last_action = action if isinstance(action, str) else ""
        edit = protocol.parse_edit(self._last_action)
        if edit is None:
            return super()._turn(action)
        self.next_turn()
        if edit.error is not None:
            self._stats["format_errors"] += 1
            obs = edit.error
        else:
            obs = self._edit(edit.arguments)
        if self.out_of_turns:
            return self._verify(obs, ended_by="max_turns")
        return f"{obs}\n{self.turns_left_note()}", 0.0, False, False, self.make_info()

    def _edit(self, args: dict[str, Any]) -> str:
        assert self._editor is not None
        self._stats["edits"] = self._stats.get("edits", 0.0) + 1
        try:
            return self._editor(str(args["command"]), str(args["path"]),
                                **{k: v for k, v in args.items() if k not in ("command", "path")})
        except EditorError as e:
            self._stats["failed_edits"] = self._stats.get("failed_edits", 0.0) + 1
            return f"Error: {e}"
        except InfraError:
            raise
        except (TypeError, ValueError) as e:  # e.g. a NUL byte in a path
            self._stats["failed_edits"] = self._stats.get("failed_edits", 0.0) + 1
            return f"Error: the editor cannot use these parameters ({e})."

    # -- the verdict -------------------------------------------------------------------
    def _judge(self) -> tuple[float | None, dict[str, float], dict[str, Any]]:
        assert self._workspace is not None
        inst, ws, sb = self.instance, self._workspace, self._sandbox
        judge.kill_processes(sb)
        with tempfile.TemporaryDirectory(prefix="skyhub-swe-final-") as tmp:
            sb.download(TESTBED, tmp)
            too_big: list[str] = []
            final = read_tree(Path(tmp), max_file=MAX_FILE_BYTES, max_total=MAX_TREE_BYTES,
                              too_big=too_big)
        changes, set_aside = ws.changes(final, too_big)
        model_patch = ws.diff(changes)
        self._start(inst)  # the start again: files and processes
        for path, data in {**changes, **ws.test_files_after_patch()}.items():
            _put(sb, path, data)
        r = judge.run_verifier(sb, ["bash", "-c", self._test_command(inst)],
                               timeout=self.test_timeout, env=TEST_ENV)
        if sb.backend == "docker" and judge.who_broke(sb) == "host":
            raise InfraError("the sandbox's container was stopped from outside while the "
                             "tests ran")
        output = r.stdout + r.stderr
        self.last_test_log = eval_log(output, -1 if r.exit_code is None else r.exit_code)
        g = grade(inst, self.last_test_log)
        loc = self._localization(model_patch)
        breakdown = {"resolved": float(g.resolved), "fail_to_pass": g.fail_to_pass,
                     "tests_ran": float(g.valid), "set_aside": float(len(set_aside)),
                     "localization": loc["reward"],
                     **{k: v for k, v in loc.items() if k.endswith("_f1")}}
        reward = float(g.resolved) if self.reward_name == "resolved" else loc["reward"]
        return reward, breakdown, {"status": g.status, "model_patch": model_patch[-20000:],
                                   "set_aside": set_aside, "tests_timed_out": r.timed_out,
                                   "test_output": output[-3000:]}

    def _localization(self, model_patch: str) -> dict[str, float]:
        """CodeScout's scores: the locations the agent's last turn names (its answer
        format), else those its edits touch, against the gold patch's."""
        assert self._workspace is not None
        read = self._workspace.read_old
        named = localization.parse_answer(self._last_action)
        pred = named if named.files else localization.patch_locations(model_patch, read)
        return localization.score(pred, localization.patch_locations(self.instance.patch, read))

    def _test_command(self, inst: Instance) -> str:
        """The instance's `test_cmd`, the env's `test_command`, or pytest on the test files
        that its test names and test patch name."""
        given = inst.extra.get("test_cmd") or self.test_command
        if given:
            return str(given)
        files = {t.split("::", 1)[0] for t in (*inst.fail_to_pass, *inst.pass_to_pass)
                 if "::" in t and t.split("::", 1)[0].endswith(".py")}
        files |= {p for p in self._workspace.test_files if p.endswith(".py")} \
            if self._workspace is not None else set()
        return " ".join([PYTEST, *(shlex.quote(f) for f in sorted(files))])

    # -- references --------------------------------------------------------------------
    def reference_action(self) -> str | None:
        """The gold patch, applied with `git apply` in a child shell, then `<done/>`."""
        if self.task is None:
            return None
        if not self._reference_sent:
            self._reference_sent = True
            return (f"<bash>(cd {TESTBED} && git apply --whitespace=nowarn - <<'SKYHUB_PATCH'\n"
                    f"{self.instance.patch.rstrip(chr(10))}\nSKYHUB_PATCH\n)</bash>")
        return "<done/>"

    def expected_answer(self) -> dict[str, Any] | None:
        return None if self.task is None else {"patch": self.instance.patch}

    def display_question(self) -> str | None:
        return None if self.task is None else self.instance.problem_statement

    # -- tool calls --------------------------------------------------------------------
    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        if name.lower() in protocol.EDITOR_ALIASES:
            return protocol.edit_action(arguments)
        return super().tool_action(name, arguments)

    def close(self) -> None:
        super().close()
        self._snaps = {}


def _synth_data() -> Path:
    from .synth_data import dataset_dir

    path = dataset_dir() / "instances.jsonl"
    if not path.is_file():
        raise DataNotFound(f"no swe-synth tasks at {path}: make them with `skyhub swe data get "
                           "swe-synth` (downloads three projects from PyPI and plants bugs)")
    return path


def _task(inst: Instance) -> Task:
    prompt = (f"The repository at {TESTBED} has this problem:\n\n"
              f"{inst.problem_statement.strip()}\n\n"
              "Change the repository's code so that the problem is solved.")
    return Task(id=inst.instance_id, prompt=prompt, answer=inst.patch,
                meta={"repo": inst.repo, "base_commit": inst.base_commit})


def _put(sb: Any, path: str, data: bytes | None) -> None:
    """Write (or, for None, delete) a file under /testbed."""
    full = f"{TESTBED}/{path}"
    if data is None:
        sb.exec(["rm", "-f", "--", full], timeout=60)
    else:
        sb.write_file(full, data)


__all__ = ["SWEEnv"]
