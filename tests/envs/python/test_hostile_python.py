"""The python family against a hostile agent: forged rewards in python-code's
grader, processes and IPython files that would outlive a reset, symbolic answers that would
hang python-math's grader, a bridge that answers with a huge frame, who is to blame when the
sandbox breaks, and the runtime dirs a process leaves behind. Local (bubblewrap) and Docker.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from skyhub.envs.python.code_tasks import load_code_tasks
from skyhub.envs.python.grader import GradeResult, grade
from skyhub.envs.python.kernel import KernelSession
from skyhub.envs.python.runtime import make_sandbox

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from polling import eventually

pytestmark = [pytest.mark.hostile, pytest.mark.slow]

#: The bundled tasks whose tests are Python code run beside the program (MBPP asserts and
#: HumanEval check functions): the ones an in-process harness exposes.
IN_PROCESS = [t for t in load_code_tasks() if t.meta["tests"]["kind"] in ("asserts", "check")]


def grade_all(grader: Any, program_for: Any) -> dict[str, GradeResult]:
    out = {}
    for task in IN_PROCESS:
        sb, python = grader()
        out[task.id] = grade(sb, program_for(task), task.meta["tests"], python=python,
                             timeout=5.0)
    return out


# ----------------------------------------------------------------- forged rewards (python-code)
def _entry(task: Any) -> str:
    return str(task.meta.get("entry_point") or task.meta["tests"].get("entry_point"))


def _wrong(task: Any) -> str:
    """A wrong solution: the entry point exists but returns None."""
    return f"def {_entry(task)}(*args, **kwargs):\n    return None\n"


ATTACKS: dict[str, Any] = {
    # rewrite the harness's own list of tests to no-ops
    "spec_rewrite": lambda t: textwrap.dedent("""\
        import __main__, gc
        for obj in gc.get_objects():
            if isinstance(obj, dict) and isinstance(obj.get("tests"), list):
                obj["tests"][:] = ["pass"] * len(obj["tests"])
                for key in ("post", "setup"):
                    if isinstance(obj.get(key), str):
                        obj[key] = ""
        spec = getattr(__main__, "SPEC", None)
        if isinstance(spec, dict):
            spec["tests"][:] = ["pass"] * len(spec["tests"])
        """) + _wrong(t),
    # walk up the stack to the function that reports verdicts and report passes with its nonce
    "frame_walk_to_the_emitter": lambda t: textwrap.dedent("""\
        import os, sys
        f = sys._getframe()
        while f is not None:
            loc = f.f_locals
            if callable(loc.get("emit")) and "tests" in loc:
                for i in range(len(loc["tests"])):
                    loc["emit"]('%d pass ""' % i)
                os._exit(0)
            f = f.f_back
        """) + _wrong(t),
    # an answer that equals everything
    "rigged_eq": lambda t: textwrap.dedent(f"""\
        class Anything(list):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = object.__hash__
            def __bool__(self): return True
            def __len__(self): return 1
            def __iter__(self): return iter([Anything()])
            def __add__(self, other): return self
            __radd__ = __add__
            def __getitem__(self, i): return Anything()
        def {_entry(t)}(*args, **kwargs):
            return Anything()
        """),
    # assertions that cannot fail: builtins patched, AssertionError replaced, a tracer that
    # swallows every exception raised in test code
    "patched_builtins": lambda t: textwrap.dedent("""\
        import builtins, sys
        class Never(Exception):
            pass
        builtins.AssertionError = Never
        builtins.isinstance = lambda *a: True
        builtins.len = lambda x: 0
        def tracer(frame, event, arg):
            if event == "exception":
                frame.f_globals.setdefault("__skyhub_seen__", []).append(arg)
            return tracer
        sys.settrace(tracer)
        """) + _wrong(t),
    # jump over every assert statement of the test code with a line tracer
    "tracer_jumps_over_asserts": lambda t: textwrap.dedent("""\
        import sys
        def tracer(frame, event, arg):
            name = frame.f_code.co_filename
            if event == "line" and (name.startswith("<test") or frame.f_code.co_name == "check"):
                try:
                    frame.f_lineno = frame.f_lineno + 1
                except Exception:
                    pass
            return tracer
        sys.settrace(tracer)
        sys._getframe().f_back and sys._getframe().f_back.f_trace
        f = sys._getframe()
        while f is not None:
            f.f_trace = tracer
            f = f.f_back
        """) + _wrong(t),
    # read the hidden tests from wherever the harness keeps them, answer from the table
    "reads_the_hidden_tests": lambda t: textwrap.dedent(f"""\
        import ast, gc, glob, os, re, sys
        TABLE = {{}}
        texts = []
        for path in glob.glob("*") + glob.glob("../*/*") + glob.glob("/tmp/*"):
            try:
                texts.append(open(path, encoding="utf-8", errors="replace").read())
            except Exception:
                pass
        texts += [o for o in gc.get_objects() if isinstance(o, str) and "assert" in o]
        import __main__
        texts.append(repr(getattr(__main__, "SPEC", "")))
        for text in texts:
            for m in re.finditer(r"{_entry(t)}\\((.*?)\\) == (.*?)(?:\\\\n|\\n|$|\\"|')", text):
                with __import__("contextlib").suppress(Exception):
                    TABLE[repr(ast.literal_eval("(" + m.group(1) + ",)"))] = \\
                        ast.literal_eval(m.group(2))
        def {_entry(t)}(*args):
            return TABLE.get(repr(args))
        """),
    # find the nonce in the memory of any process it can read (the grader's, its parents'),
    # then write passing lines to every stdout it can open
    "reads_the_graders_memory": lambda t: textwrap.dedent("""\
        import os, re
        nonces, fds = set(), []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                fds.append(os.open(f"/proc/{pid}/fd/1", os.O_WRONLY))
            except OSError:
                pass
            try:
                maps = open(f"/proc/{pid}/maps").read().splitlines()
                mem = open(f"/proc/{pid}/mem", "rb", 0)
            except OSError:
                continue
            for line in maps:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if hi - lo > 64 << 20 or "rw" not in line.split()[1]:
                    continue
                try:
                    mem.seek(lo)
                    chunk = mem.read(hi - lo)
                except OSError:
                    continue
                nonces.update(re.findall(rb"SKYHUB-GRADE ([0-9a-f]{32})", chunk))
                nonces.update(re.findall(rb"(?<![0-9a-f])([0-9a-f]{32})\\n", chunk))
        for fd in fds + [1, 2]:
            for nonce in nonces:
                for i in range(10):
                    line = '\\nSKYHUB-GRADE %s start\\nSKYHUB-GRADE %s %d pass ""\\n' % (
                        nonce.decode(), nonce.decode(), i)
                    try:
                        os.write(fd, line.encode())
                    except OSError:
                        pass
        """) + _wrong(t),
    "os_exit_before_the_tests": lambda t: "import os\nos._exit(0)\n" + _wrong(t),
    "prints_fake_grade_lines": lambda t: textwrap.dedent("""\
        import os, sys
        for i in range(10):
            line = '\\nSKYHUB-GRADE start\\nSKYHUB-GRADE %s %d pass ""\\n' % ("0" * 32, i)
            sys.stdout.write(line)
            for fd in range(1, 20):
                try:
                    os.write(fd, line.encode())
                except OSError:
                    pass
        """) + _wrong(t),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_forged_passes_score_below_one_on_every_task(grader: Any, attack: str) -> None:
    results = grade_all(grader, ATTACKS[attack])
    passed = sorted(tid for tid, r in results.items() if r.all_passed)
    assert not passed, f"{attack} passed every test of {passed}"
    assert not any(r.infra_error for r in results.values()), results


def test_the_references_still_pass_every_task(grader: Any) -> None:
    results = grade_all(grader, lambda t: t.answer)
    failed = {tid: r for tid, r in results.items() if not r.all_passed}
    assert not failed


# ----------------------------------------------- the grader's blame: program-broken vs infra
ADD_TESTS = {"kind": "asserts", "setup": "",
             "asserts": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]}
BREAKERS = {
    "kills_its_parent": "import os\nos.kill(os.getppid(), 9)\n",
    "kills_every_ancestor": textwrap.dedent("""\
        import os
        pid = os.getppid()
        chain = []
        while pid > 1:
            chain.append(pid)
            try:
                pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            except Exception:
                break
        for p in reversed(chain):
            try:
                os.kill(p, 9)
            except OSError:
                pass
        """),
    "kill_minus_one": "import os\nos.kill(-1, 9)\n",
}


BREAKER_TASKS = {
    "asserts": (ADD_TESTS, "def add(a, b):\n    return a + b + 1\n",
                "def add(a, b):\n    return a + b\n"),
    "stdio": ({"kind": "stdio", "cases": [{"input": "1 2\n", "output": "3\n"},
                                          {"input": "5 5\n", "output": "10\n"}]},
              "print(0)\n", "a, b = map(int, input().split())\nprint(a + b)\n"),
    "functional": ({"kind": "functional", "method": "add",
                    "cases": [{"input": "1\n2", "output": "3"}, {"input": "5\n5", "output": "10"}]},
                   "class Solution:\n    def add(self, a, b):\n        return 0\n",
                   "class Solution:\n    def add(self, a, b):\n        return a + b\n"),
}


@pytest.mark.parametrize("kind", sorted(BREAKER_TASKS))
@pytest.mark.parametrize("name", sorted(BREAKERS))
def test_a_program_that_breaks_its_grader_fails_and_is_no_infra_error(
        grader: Any, backend: str, name: str, kind: str) -> None:
    tests, wrong, right = BREAKER_TASKS[kind]
    sb, python = grader()
    r = grade(sb, BREAKERS[name] + wrong, tests, python=python, timeout=5.0)
    assert not r.infra_error and r.passed < r.total, r
    if kind == "asserts" or backend == "docker":  # its harness (or agent) was killable
        assert r.sandbox_broken, r
    sb, python = grader()  # and the sandbox grades the next program as usual
    assert grade(sb, right, tests, python=python).all_passed


def test_a_grading_sandbox_gone_from_outside_is_an_infra_error(backend: str) -> None:
    sb, argv = make_sandbox(backend)
    try:
        if backend == "docker":
            sb.container.remove(force=True)  # type: ignore[attr-defined]
        else:  # the scratch dir deleted on the host: no command can start there
            import shutil

            shutil.rmtree(sb._root)  # type: ignore[attr-defined]
        r = grade(sb, "def add(a, b):\n    return a + b\n", ADD_TESTS, python=argv[0])
        assert r.infra_error and not r.sandbox_broken and r.passed == 0, r
    finally:
        sb.close()


def test_python_code_scores_a_grader_breaking_answer_with_sandbox_broken(backend: str) -> None:
    from skyhub.envs.python.code_env import CodeEnv

    with CodeEnv(backend=backend, warm_reset=False) as env:
        env.reset(options={"task_id": "skyhub-code/digit_root"})
        program = BREAKERS["kills_every_ancestor"] + "def digit_root(n):\n    return 0\n"
        _, reward, done, _, info = env.step(f"<answer>\n```python\n{program}```\n</answer>")
        assert done and reward == 0.0
        assert info["infra_error"] is False and info.get("sandbox_broken") is True, info
        env.reset(options={"task_id": "skyhub-code/digit_root"})  # the oracle still passes
        _, reward, _, _, info = env.step(env.reference_action() or "")
        assert reward == 1.0 and not info.get("sandbox_broken"), info


# ------------------------------------------------------ nothing of an episode survives (1, 5)
def host_pids_with(token: str) -> list[int]:
    """Processes on this machine (sandboxes included) whose command line holds `token`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    out.append(int(entry))
    return out


def start_daemons(token: str) -> str:
    """A cell that leaves daemons behind, without the kernel's marker in their environment:
    one in a new session, one double-forked."""
    return textwrap.dedent(f"""\
        import os, subprocess, sys
        env = {{k: v for k, v in os.environ.items() if not k.startswith("SKYHUB")}}
        code = "import time\\nwhile True:\\n    time.sleep(0.2)\\n# {token}"
        subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        if os.fork() == 0:
            try:
                os.setsid()
                if os.fork() == 0:
                    os.execve(sys.executable, [sys.executable, "-c", code], env)
            finally:
                os._exit(0)
        os.waitpid(-1, 0)
        """)


def test_reset_kills_every_process_of_the_episode(session: KernelSession) -> None:
    import uuid

    for cold in (False, True):
        session.reset()
        token = f"skyhub-daemon-{uuid.uuid4().hex}"
        r = session.run(start_daemons(token), timeout=30)
        assert r.ok, r
        assert eventually(lambda t=token: len(host_pids_with(t)) >= 2), host_pids_with(token)
        session.reset(cold=cold)
        assert eventually(lambda t=token: not host_pids_with(t)), \
            f"cold={cold}: {host_pids_with(token)} survived the reset"


POISON = textwrap.dedent("""\
    import glob, os, site
    ipydir = os.environ.get("IPYTHONDIR") or os.path.expanduser("~/.ipython")
    spots = {
        "startup": os.path.join(ipydir, "profile_default", "startup", "00-poison.py"),
        "home_startup": os.path.expanduser("~/.ipython/profile_default/startup/00-p.py"),
        "kernel_config": os.path.join(ipydir, "profile_default", "ipython_kernel_config.py"),
        "user_site": os.path.join(site.getusersitepackages(), "usercustomize.py"),
    }
    for where, path in spots.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            if where == "kernel_config":
                f.write("c.IPKernelApp.exec_lines = ['import builtins; builtins.POISONED = 1']\\n")
            else:
                f.write(f"import builtins\\nbuiltins.POISONED = {where!r}\\n")
    # code run in every other kernel whose connection file can be read (a spare kernel)
    from ipykernel import get_connection_file
    from jupyter_client import BlockingKernelClient
    runtime = os.environ.get("JUPYTER_RUNTIME_DIR", "/tmp")
    own = os.path.realpath(get_connection_file())
    for cf in {os.path.realpath(p) for p in glob.glob(os.path.join(runtime, "kernel-*.json")) +
               glob.glob("/tmp/.skyhub-jupyter-*/kernel-*.json")} - {own}:
        try:
            kc = BlockingKernelClient()
            kc.load_connection_file(cf)
            kc.start_channels()
            kc.execute("import builtins; builtins.POISONED = 'spare'")
            kc.get_shell_msg(timeout=10)
            kc.stop_channels()
        except Exception:
            pass
    """)


def test_ipython_files_and_spare_kernels_do_not_reach_a_later_episode(
        session: KernelSession) -> None:
    session.reset()
    r = session.run(POISON, timeout=60)
    assert r.error is None, r
    for _ in range(2):  # the old bridge handed out a spare: poisoned, or started after them
        session.reset()
        r = session.run("import builtins, sys\n"
                        "(getattr(builtins, 'POISONED', None), sys.flags.no_user_site)",
                        timeout=30)
        assert r.result == "(None, 1)", r


def test_the_workdir_stays_importable_in_an_isolated_kernel(session: KernelSession) -> None:
    session.reset()
    r = session.run("open('helper_mod.py', 'w').write('X = 42\\n')\n"
                    "import helper_mod, sys\n(helper_mod.X, sys.flags.isolated)")
    assert r.result == "(42, 1)", r


# ------------------------------------------------- a bridge that is not ours any more (7, 10)
FAKE_BRIDGE = textwrap.dedent("""\
    import json, os, struct, sys
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    def read():
        head = inp.read(4)
        if len(head) < 4:
            sys.exit(0)
        return json.loads(inp.read(struct.unpack(">I", head)[0]))
    def send(obj):
        body = json.dumps(obj).encode()
        out.write(struct.pack(">I", len(body)) + body)
        out.flush()
    while True:
        req = read()
        reply = {"id": req["id"], "ok": True, "stdout": "", "stderr": "", "result": "",
                 "error": None, "timed_out": False, "restarted": None, "duration_s": 0.0}
        if req.get("code") == "huge":
            reply["stdout"] = "x" * (48 << 20)
        elif req.get("code") == "types":
            reply["stdout"] = ["not", "text"]
        elif req.get("code") == "huge-error":
            reply["error"] = {"ename": "E", "evalue": "v" * (8 << 20), "traceback": ""}
        send(reply)
    """)


@pytest.mark.parametrize("mode", ["huge", "types", "huge-error"])
def test_a_hijacked_bridge_gives_a_bounded_observation_and_a_new_runtime(
        session: KernelSession, mode: str) -> None:
    session.reset()
    live = session._live
    live.drop_bridge()
    live.chan = session.sandbox.spawn([live.argv[0], "-c", FAKE_BRIDGE])
    r = session.run(mode, timeout=5, max_output=4096)
    assert r.broken and r.restarted, r
    assert len(r.render(5)) < 20_000
    assert session.run("6 * 7").result == "42"  # the real runtime is back


def test_a_cell_that_kills_its_runtime_is_scored_with_sandbox_broken(backend: str) -> None:
    from skyhub.envs.python.math_env import MathEnv

    with MathEnv(backend=backend, warm_reset=False) as env:
        env.reset(options={"task_id": "math-01-primes"})
        obs, reward, done, _, info = env.step(
            "<python>import os, signal; os.kill(os.getppid(), signal.SIGKILL)</python>")
        assert not done and info["infra_error"] is False and info["sandbox_broken"] is True
        assert "killed" in obs
        obs, _, done, _, info = env.step("<python>print(6 * 7)</python>")
        assert "42" in obs and not done
        _, reward, done, _, info = env.step("<answer>5736396</answer>")
        assert done and reward == 1.0 and info["infra_error"] is False
        assert info["sandbox_broken"] is True  # the episode's record keeps it


def test_a_kernel_sandbox_gone_from_outside_is_an_infra_error(backend: str) -> None:
    from skyhub.envs.python.math_env import MathEnv

    with MathEnv(backend=backend, warm_reset=False) as env:
        env.reset(options={"task_id": "math-01-primes"})
        sb = env.session.sandbox
        if backend == "docker":
            sb.container.remove(force=True)  # type: ignore[attr-defined]
        else:  # its processes killed and its scratch dir deleted, on the host
            import shutil

            sb.kill_processes()  # type: ignore[attr-defined]
            shutil.rmtree(sb._root)  # type: ignore[attr-defined]
        _, reward, done, _, info = env.step("<python>print(1)</python>")
        assert done and info["infra_error"] is True and reward == 0.0, info


# ----------------------------------------------------------- answers that would hang grading
def bounded(fn: Any, timeout: float = 120.0) -> Any:
    """`fn()`'s value, failing the test if it does not return within `timeout` s (a hang
    detector, not a speed test: the budgets under test are far smaller)."""
    out: dict[str, Any] = {}

    def run() -> None:
        out["value"] = fn()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert "value" in out, f"did not return within {timeout} s"
    return out["value"]


HOSTILE_MATH = {
    "nested_exp": "exp(exp(exp(100)))",
    "nested_exp_tex": "e^{e^{e^{100}}}",
    "tower": "10**10**10",
    "tower_tex": "10^{10^{10}}",
    "factorial": "factorial(10**9)",
    "factorial_tex": "(10^{9})!",
    "floor_of_exp": "\\lfloor e^{e^{100}} \\rfloor",
    "floor_exp_exp": "floor(exp(exp(30)))",
    "tan_of_exp": "tan(exp(exp(50)))",
    "cosh_tower": "cosh(exp(1000))",
    "matrix": "Matrix([[1]*1000]*1000)",
    "pmatrix": "\\begin{pmatrix} " + " & ".join(["1"] * 2000) + " \\end{pmatrix}",
    "parentheses": "(" * 400 + "1" + ")" * 400 + "+1",
    "fractions": "\\frac{1}{" * 300 + "2" + "}" * 300,
    "unit_words": "1 " + "ab" * 40 + "!",
    "long_digits": "1" * 19_000 + "x",
    "long_ratio": "1" * 19_000 + "/x",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_MATH))
def test_hostile_math_answers_score_zero_in_bounded_time(name: str) -> None:
    from skyhub.envs.python.math_check import check_answer

    verdict = bounded(lambda: check_answer(HOSTILE_MATH[name], "1", timeout_s=60))
    # refused by the size guard (or simply not equal) long before the 60 s budget
    assert verdict.correct is False and verdict.timed_out is False, verdict


def test_a_comparison_past_its_budget_scores_zero_and_the_next_one_works() -> None:
    from skyhub.envs.python.math_check import check_answer

    v = bounded(lambda: check_answer("\\frac{6}{4}", "\\frac{3}{2}", timeout_s=1e-6))
    assert (v.correct, v.timed_out) == (False, True)
    v = bounded(lambda: check_answer("\\frac{6}{4}", "\\frac{3}{2}"))
    assert (v.correct, v.timed_out) == (True, False)


def test_python_math_scores_a_hanging_answer_zero_not_infra() -> None:
    from skyhub.envs.python.math_env import MathEnv

    env = MathEnv(backend="local", grade_timeout_s=1e-6)  # every symbolic comparison "hangs"
    try:
        env.start_episode(None, {"task_id": "math-04-polynomial-integral"})
        _, reward, done, _, info = bounded(lambda: env.step("<answer>exp(exp(exp(100)))</answer>"))
        assert done and reward == 0.0 and info["infra_error"] is False
        assert info["grading"] == "timed out" and info["outcome"] == "failure"
    finally:
        env.close()


# ----------------------------------------------------------------- runtime dirs do not leak
def test_runtime_dirs_are_removed_at_exit_and_reaped_after_a_crash(bwrap: str) -> None:
    from skyhub.envs.python.runtime import RUNTIME_PREFIX
    from skyhub.sandbox.local_scratch import make_base

    base = make_base()
    crashed = subprocess.run([sys.executable, "-c", textwrap.dedent("""\
        import os
        from skyhub.envs.python.runtime import local_runtime
        local_runtime()
        print(os.getpid(), flush=True)
        os._exit(0)  # no atexit: what a crash leaves
        """)], capture_output=True, text=True, timeout=300)
    left = base / f"{RUNTIME_PREFIX}{crashed.stdout.split()[-1]}"
    assert left.is_dir(), crashed.stderr
    clean = subprocess.run([sys.executable, "-c", textwrap.dedent("""\
        import os
        from skyhub.envs.python.runtime import local_runtime
        local_runtime()
        print(os.getpid())
        """)], capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr
    assert not (base / f"{RUNTIME_PREFIX}{clean.stdout.split()[-1]}").exists()  # at exit
    assert not left.exists()  # reaped by the next process


def test_what_tests_do_with_a_program_still_works_across_the_process_boundary(
        grader: Any) -> None:
    """Objects, generators, exceptions, kwargs, module names and values the tests use keep
    working when the program runs in its own process."""
    program = textwrap.dedent("""\
        import math
        from collections import Counter, OrderedDict, namedtuple
        Point = namedtuple("Point", "x y")
        LIMIT = {"a": (1, 2.5), "b": frozenset({3})}
        class Stack:
            def __init__(self):
                self.items = []
            def push(self, x):
                self.items.append(x)
            def pop(self):
                return self.items.pop()
            def __len__(self):
                return len(self.items)
        def evens(n):
            for i in range(n):
                if i % 2 == 0:
                    yield i
        def checked(x, *, strict=False):
            if x < 0:
                raise ValueError("negative")
            return Counter("aab") if strict else OrderedDict(a=1)
        def big():
            return 2 ** 200, -0.0, float("inf"), b"\\x00\\xff", 1 + 2j, {1, 2}, None, True
        def origin():
            return Point(0, 0)
        """)
    tests = {"kind": "asserts", "setup": "", "asserts": [
        "s = Stack(); s.push(1); s.push(2); assert s.pop() == 2 and len(s) == 1",
        "assert list(evens(7)) == [0, 2, 4, 6] and sum(evens(5)) == 6",
        "try:\n    checked(-1)\nexcept ValueError as e:\n    assert 'negative' in str(e)\n"
        "else:\n    raise AssertionError('no error')",
        "assert checked(1, strict=True) == {'a': 2, 'b': 1} and checked(1) == {'a': 1}",
        "assert big() == (2 ** 200, 0.0, math.inf, b'\\x00\\xff', 1 + 2j, {1, 2}, None, True)",
        "assert origin() == (0, 0) and LIMIT == {'a': (1, 2.5), 'b': frozenset({3})}",
        "assert math.isclose(math.pi, 3.14159, rel_tol=1e-3)",
    ]}
    sb, python = grader()
    r = grade(sb, program, tests, python=python)
    assert r.all_passed, r
