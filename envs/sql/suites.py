"""The SQL family's evaluation suites: `skyrl-sql`, SkyRL-SQL's Spider results table.

SkyRL-SQL (NovaSky, "SkyRL-SQL: Matching GPT-4o and o4-mini on Text2SQL with Multi-Turn RL",
May 2025) reports execution accuracy on five Spider benchmarks, each question given 5 tool
rounds and a final answer, scored with Spider's official evaluator (`METHOD` below; the
suite's report carries it in its description).
Every column here is `sql-spider` loading one release with the Spider loader, so each is
looked for where `skyhub sql data get` puts it:

| column           | question file                            | databases                     |
|------------------|------------------------------------------|-------------------------------|
| Spider-Dev       | $SKYHUB_DATA/spider/dev.json, else the   | spider/database/ (bundled:    |
|                  | bundled subset (972 of 1034 questions)   | 19 of 20 dev databases)       |
| Spider-Test      | $SKYHUB_DATA/spider/test.json            | spider/test_database/         |
| Spider-Realistic | $SKYHUB_DATA/spider-realistic/           | Spider's                      |
|                  | spider-realistic.json                    |                               |
| Spider-DK        | $SKYHUB_DATA/spider-dk/Spider-DK.json    | its 3 own + Spider's          |
| Spider-Syn       | $SKYHUB_DATA/spider-syn/dev.json (the    | Spider's                      |
|                  | SpiderSynQuestion of each is asked)      |                               |

`variant` (the Spider loader's folder name; `name=` would collide with the dataset dispatcher's
own argument) makes each variant look in `$SKYHUB_DATA/<variant>/` and prefix its task ids.
OmniSQL's layout (its data.zip, where SkyRL-SQL's evaluation reads from: `spider/`,
`Spider-DK/`, `spider-realistic/`, `Spider-Syn/`, the variants using `spider/database/`) is
found from its root, given to every run as `data_dir=`:
`skyhub eval suite skyrl-sql --data-dir ~/OmniSQL/data`; SkyRL-SQL's evaluation files
(their schema text) are then read from `skyrl_eval/` next to that `data/`, else from
`$SKYHUB_DATA/skyrl-sql-eval/`, where found.
Imported when the registry loads the family (envs/sql/__init__.py): dataclasses only.
"""

from __future__ import annotations

from skyhub.eval.suites import Suite, SuiteRun, register_suite

SOURCE = ("NovaSky (Shu Liu et al.), \"SkyRL-SQL: Matching GPT-4o and o4-mini on Text2SQL with "
          "Multi-Turn RL\", blog post, 20 May 2025, https://novasky-ai.notion.site/skyrl-sql "
          "(the same table is in the SkyRL README, github.com/NovaSky-AI/SkyRL)")

COLUMNS = ("Spider-Dev", "Spider-Test", "Spider-Realistic", "Spider-DK", "Spider-Syn")

# How SkyRL-SQL measured its table, which the suite reproduces:
# - protocol: its evaluation loop (SQLEnv protocol="skyrl-eval"): up to 5 tool rounds, in
#   which each <sql> runs and its result comes back, then one final generation; the
#   prediction is the last <solution> of the agent's turns, with no format rule; a query
#   that fails, runs past 40 s or is missing is wrong;
# - metric: Spider's official execution accuracy (taoyds/test-suite-sql-eval, exec match
#   with plug_value=False, keep_distinct=False: reward="spider_exec", spider_eval.py), the
#   share of questions judged right. Not the training reward (set equality, -1 for a broken
#   format), which scores other things right and wrong.
PROTOCOL = "skyrl-eval"
REWARD = "spider_exec"
MAX_TURNS = 5  # tool rounds ("evaluated in 5 turns", SkyRL README); then the final answer
METHOD = ("Protocol: SkyRL-SQL's evaluation (skyrl-eval): up to 5 tool rounds, each <sql> run "
          "and its result shown, then one final generation; the prediction is the last "
          "<solution> of the agent's turns, with no format rule; a query that fails, runs "
          "past 40 s or is missing is wrong. Metric: Spider's official execution accuracy "
          "(test-suite-sql-eval exec match, plug_value=False, keep_distinct=False: DISTINCT "
          "removed, rows as a multiset, in order when the gold says ORDER BY, any column "
          "order).")

_HOW = {"protocol": PROTOCOL, "reward": REWARD}
_SPIDER_HINT = ("'skyhub sql data get spider' puts the official spider_data.zip in "
                "$SKYHUB_DATA/spider/")
_NEEDS_SPIDER = " (its databases are Spider's: also run 'skyhub sql data get spider')"

RUNS = (
    SuiteRun("Spider-Dev", "sql-spider", {"split": "dev", **_HOW},
             max_turns=MAX_TURNS,
             data_hint="Without data this runs the bundled Spider dev subset (972 of the 1034 "
                       "questions: wta_1 is missing). For the full dev set, "
                       f"{_SPIDER_HINT} (dev.json, database/)."),
    SuiteRun("Spider-Test", "sql-spider", {"split": "test", **_HOW},
             max_turns=MAX_TURNS,
             data_hint=f"{_SPIDER_HINT}: the 2024 release has test.json and test_database/ "
                       "(2,147 questions)."),
    SuiteRun("Spider-Realistic", "sql-spider",
             {"variant": "spider-realistic", "split": "spider-realistic", **_HOW},
             max_turns=MAX_TURNS,
             data_hint="'skyhub sql data get spider-realistic' (zenodo.org/records/5205322) puts "
                       "spider-realistic.json in $SKYHUB_DATA/spider-realistic/"
                       f"{_NEEDS_SPIDER}."),
    SuiteRun("Spider-DK", "sql-spider",
             {"variant": "spider-dk", "split": "Spider-DK", **_HOW},
             max_turns=MAX_TURNS,
             data_hint="'skyhub sql data get spider-dk' (github.com/ygan/Spider-DK) puts "
                       "Spider-DK.json, tables.json and its 3 databases in database/ under "
                       f"$SKYHUB_DATA/spider-dk/{_NEEDS_SPIDER}."),
    SuiteRun("Spider-Syn", "sql-spider",
             {"variant": "spider-syn", "split": "dev", **_HOW},
             max_turns=MAX_TURNS,
             data_hint="'skyhub sql data get spider-syn' (github.com/ygan/Spider-Syn) puts its "
                       "Spider-Syn/dev.json in $SKYHUB_DATA/spider-syn/ (the SpiderSynQuestion "
                       f"of each example is asked){_NEEDS_SPIDER}."),
)


def _row(*values: float) -> dict[str, float]:
    return dict(zip(COLUMNS, values, strict=True))


#: execution accuracy in percent, from the SkyRL-SQL post's table (all evaluated in 5 turns)
REFERENCE = {
    "SkyRL-SQL-7B": _row(83.9, 85.2, 81.1, 72.0, 73.7),
    "GPT-4o": _row(81.3, 82.4, 80.1, 72.1, 71.9),
    "o4-mini": _row(80.6, 81.8, 81.2, 70.8, 72.1),
    "Qwen2.5-Coder-7B-Instruct": _row(77.1, 79.6, 74.2, 62.8, 66.2),
}

SKYRL_SQL = Suite(
    name="skyrl-sql",
    description="SkyRL-SQL's evaluation: execution accuracy on Spider-Dev, Spider-Test, "
                "Spider-Realistic, Spider-DK and Spider-Syn. " + METHOD,
    runs=RUNS, reference=REFERENCE, source=SOURCE)


def register() -> None:
    """Register the family's suites; the registry loads the family more than once in tests
    (and plugins may reload), so an already registered suite is replaced, not an error."""
    register_suite(SKYRL_SQL, override=True)
