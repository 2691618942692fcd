"""skyhub's `sql-spider` (reward="skyrl", the default) against skyrl-gym 0.4's `text2sql`, the
env SkyRL-SQL trains with: the same action sequences on the same Spider dev tasks must get the
same reward and the same done/not-done at every step.

Both envs read copies of the bundled Spider dev databases (skyrl-gym opens them read-write).
Scenarios cover what a policy writes while it learns the format: right and wrong answers,
duplicates and row order (set comparison), syntax errors, missing/unclosed/upper-case/spaced
think and solution tags, two solutions, tags inside the solution, invalid turns before the
answer, the answer on the last turn, running out of turns, fences, trailing text. The only
allowed differences are the unsafe ones listed in SQLEnv's docstring (statements that write,
which skyrl-gym runs on a read-write connection); `test_documented_differences` checks the
reward skyhub gives there.

Needs skyrl-gym (`pip install 'skyrl-gym==0.4.*'`, a test dependency).
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import skyhub
from skyhub.envs.sql.datasets.spider import BUNDLED_DIR

MAX_TURNS = 3
N_TASKS = 60
T = "<think>I should check the tables first.</think>\n"


def sol(q: str) -> str:
    return f"<solution>{q}</solution>"


def sql(q: str) -> str:
    return f"<sql>{q}</sql>"


def misspell(g: str) -> str:
    return "SELEC" + g[6:] if g[:6].upper() == "SELECT" else "SELEC " + g


#: name -> (gold, another query) -> the agent's turns
SCENARIOS: dict[str, Callable[[str, str], list[str]]] = {
    "gold": lambda g, w: [T + sol(g)],
    "gold with semicolon": lambda g, w: [T + sol(g + ";")],
    "gold with whitespace": lambda g, w: [T + sol(f"\n  {g}  \n")],
    "gold with a comment": lambda g, w: [T + sol(g + " -- final answer")],
    "wrong": lambda g, w: [T + sol(w)],
    "explore then gold": lambda g, w: [T + sql(g), T + sol(g)],
    "duplicates": lambda g, w: [T + sol(f"SELECT * FROM ({g}) UNION ALL SELECT * FROM ({g})")],
    "reversed order": lambda g, w: [T + sol(f"SELECT * FROM ({g}) ORDER BY 1 DESC")],
    "syntax error": lambda g, w: [T + sol(misspell(g))],
    "two statements": lambda g, w: [T + sol(g + "; SELECT 1")],
    "empty solution": lambda g, w: [T + sol("")],
    "no think": lambda g, w: [sol(g)],
    "unclosed think": lambda g, w: ["<think>I should check.\n" + sol(g)],
    "upper-case think": lambda g, w: ["<THINK>checking</THINK>\n" + sol(g)],
    "spaced think": lambda g, w: ["<think >checking</think>\n" + sol(g)],
    "thinking tag": lambda g, w: ["<thinking>checking</thinking>\n" + sol(g)],
    "think after solution": lambda g, w: [sol(g) + "\n" + T],
    "upper-case solution": lambda g, w: [T + f"<SOLUTION>{g}</SOLUTION>", T + sol(g)],
    "spaced solution": lambda g, w: [T + f"<solution >{g}</solution>"],
    "mixed-case closing tag": lambda g, w: [T + f"<solution>{g}</Solution>"],
    "unclosed solution": lambda g, w: [T + f"<solution>{g}", T + sol(g)],
    "solution across turns": lambda g, w: [T + f"<solution>{g}", "</solution>"],
    "reversed solution tags": lambda g, w: [T + f"</solution>{g}<solution>"],
    "two solutions": lambda g, w: [T + sol(w) + "\n" + sol(g)],
    "sql inside solution": lambda g, w: [T + f"<solution>{g} <sql>SELECT 1</sql></solution>"],
    "think inside solution": lambda g, w: [T + f"<solution><think>sure</think>{g}</solution>"],
    "observation inside solution": lambda g, w: [T + f"<solution>{g}</OBSERVATION></solution>"],
    "empty turn first": lambda g, w: ["", T + sol(g)],
    "prose turn first": lambda g, w: ["Let me look at the schema.", T + sol(g)],
    "thinking-only turn first": lambda g, w: [T, T + sol(g)],
    "unclosed sql first": lambda g, w: [T + f"<sql>{g}", T + sol(g)],
    "upper-case sql first": lambda g, w: [T + f"<SQL>{g}</SQL>", T + sol(g)],
    "answer on the last turn": lambda g, w: [T + sql("SELECT 1"), T + sql(g), T + sol(g)],
    "wrong answer on the last turn": lambda g, w: [T + sql(g), "", T + sol(w)],
    "out of turns": lambda g, w: [T + sql(g)] * MAX_TURNS,
    "out of turns with prose": lambda g, w: ["I do not know."] * MAX_TURNS,
    "no think after observation": lambda g, w: [T + sql(g), sol(g)],
    "prose before think after observation": lambda g, w: [T + sql(g), "Now: " + T + sol(g)],
    "whitespace before think after observation": lambda g, w: [T + sql(g), "\n   " + T + sol(g)],
    "upper-case think after observation": lambda g, w: [T + sql(g), "<THINK>ok</THINK>" + sol(g)],
    "unclosed think after observation": lambda g, w: [T + sql(g), "<think>ok\n" + sol(g)],
    "fake observation in a turn": lambda g, w: [
        T + sql(g) + "<observation>fake</observation>", T + sol(g)],
    "sql and solution in one turn": lambda g, w: [T + sql(w) + "\n" + sol(g)],
    "fenced solution": lambda g, w: [T + f"<solution>```sql\n{g}\n```</solution>"],
    "trailing text": lambda g, w: [T + sol(g) + "\nThat is my final answer."],
}


@pytest.fixture(scope="module")
def skyrl_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """skyrl-gym's layout (`<db_path>/spider/database/<db>/<db>.sqlite`), on copies."""
    root = tmp_path_factory.mktemp("skyrl-sql")
    shutil.copytree(BUNDLED_DIR / "database", root / "spider" / "database")
    return root


@pytest.fixture(scope="module")
def text2sql(need: Callable[[str, str, str], None]) -> Callable[..., object]:
    try:
        import skyrl_gym
        from omegaconf import DictConfig
    except ImportError as e:
        need("skyrl-gym", "SKYHUB_REQUIRE_SKYRL_GYM",
             f"it is not installed ({e}): pip install 'skyrl-gym==0.4.*'")

    def make(root: Path, db: str, gold: str, max_turns: int = MAX_TURNS) -> object:
        return skyrl_gym.make("text2sql", env_config=DictConfig({"db_path": str(root)}),
                              extras={"db_id": db, "data": "spider", "max_turns": max_turns,
                                      "reward_spec": {"method": "rule", "ground_truth": gold}})
    return make


def skyrl_steps(env: object, actions: list[str]) -> list[tuple[float, bool]]:
    out = []
    for a in actions:
        step = env.step(a)  # type: ignore[attr-defined]
        out.append((float(step["reward"]), bool(step["done"])))
        if step["done"]:
            break
    return out


def skyhub_steps(env: object, task_id: str, actions: list[str]) -> list[tuple[float, bool]]:
    env.reset(options={"task_id": task_id})  # type: ignore[attr-defined]
    out = []
    for a in actions:
        _, r, term, trunc, _ = env.step(a)  # type: ignore[attr-defined]
        out.append((float(r), bool(term or trunc)))
        if term or trunc:
            break
    return out


def test_skyhub_and_skyrl_gym_agree_on_every_step(skyrl_root: Path,
                                                  text2sql: Callable[..., object]) -> None:
    with skyhub.make("sql-spider", max_turns=MAX_TURNS) as env:
        tasks = env.tasks[:: len(env.tasks) // N_TASKS][:N_TASKS]
        assert len(tasks) == N_TASKS and len({t.meta["db_id"] for t in tasks}) >= 15
        disagreements: Counter[str] = Counter()
        examples: dict[str, str] = {}
        rewards: Counter[float] = Counter()
        for i, task in enumerate(tasks):
            gold = str(task.answer).strip().rstrip(";").strip()
            other = str(tasks[(i + 1) % len(tasks)].answer)  # usually another database's
            db = task.meta["db_id"]
            for name, scenario in SCENARIOS.items():
                actions = scenario(gold, other)
                theirs = skyrl_steps(text2sql(skyrl_root, db, str(task.answer)), actions)
                ours = skyhub_steps(env, task.id, actions)
                rewards[theirs[-1][0]] += 1
                if ours != theirs:
                    disagreements[name] += 1
                    examples.setdefault(name, f"{task.id}: skyrl-gym {theirs}, skyhub {ours}")
    episodes = len(tasks) * len(SCENARIOS)
    print(f"\n{episodes} episodes ({len(tasks)} tasks x {len(SCENARIOS)} scenarios), "
          f"{sum(disagreements.values())} disagree; final rewards {dict(rewards)}")
    for name, n in disagreements.most_common():
        print(f"  {name}: {n}  e.g. {examples[name]}")
    assert len(SCENARIOS) >= 25
    assert {1.0, 0.0, -1.0} <= set(rewards)  # the scenarios reach every reward
    assert not disagreements, dict(disagreements)


def test_documented_differences(skyrl_root: Path, text2sql: Callable[..., object]) -> None:
    """Two cases of SQLEnv's docstring. A write: skyrl-gym runs it (rolled back) and scores
    its empty result, so a DELETE "answers" a question whose gold result is empty; skyhub
    refuses every write, which scores 0. A tag in text the env wrote: skyrl-gym's format
    check reads the `<solution>` a query result put in its observation (-1 for the right
    answer); skyhub reads the agent's turns only (1)."""
    with skyhub.make("sql-spider", max_turns=MAX_TURNS) as env:
        task = next(t for t in env.tasks if env.reset(options={"task_id": t.id})
                    and not env.gold_result().rows)
        db, gold = task.meta["db_id"], str(task.answer)
        table = env.engine.execute(db, env.data.db_path(db),
                                   "SELECT name FROM sqlite_master WHERE type = 'table'").rows[0][0]
        cases = {  # actions -> (skyrl-gym's, skyhub's)
            (T + sol(f'DELETE FROM "{table}"'),): ([(1.0, True)], [(0.0, True)]),
            (T + sql("SELECT '<sol' || 'ution>1</sol' || 'ution>'"), T + sol(gold)):
                ([(0.0, False), (-1.0, True)], [(0.0, False), (1.0, True)]),
        }
        for actions, (expected_theirs, expected_ours) in cases.items():
            assert skyrl_steps(text2sql(skyrl_root, db, gold), list(actions)) == expected_theirs
            assert skyhub_steps(env, task.id, list(actions)) == expected_ours
