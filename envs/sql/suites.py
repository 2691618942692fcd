"""The SQL family's evaluation suites: `skyrl-sql`, SkyRL-SQL's Spider results table.

SkyRL-SQL (NovaSky, "SkyRL-SQL: Matching GPT-4o and o4-mini on Text2SQL with Multi-Turn RL",
May 2025) reports execution accuracy on five Spider benchmarks, each episode allowed 5 turns.
Every column here is `sql-spider` loading one release with the Spider loader, so each is
looked for where `skyhub data get` puts it:

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
Imported when the registry loads the family (envs/sql/__init__.py): dataclasses only.
"""

from __future__ import annotations

from skyhub.suites import Suite, SuiteRun, register_suite

SOURCE = ("NovaSky (Shu Liu et al.), \"SkyRL-SQL: Matching GPT-4o and o4-mini on Text2SQL with "
          "Multi-Turn RL\", blog post, 20 May 2025, https://novasky-ai.notion.site/skyrl-sql "
          "(the same table is in the SkyRL README, github.com/NovaSky-AI/SkyRL)")

COLUMNS = ("Spider-Dev", "Spider-Test", "Spider-Realistic", "Spider-DK", "Spider-Syn")

# SkyRL-SQL scores a benchmark with the check it trains with: the solution is right when the
# set of its result rows equals the gold query's (SkyRL's text2sql reward; a broken format
# scores -1), and execution accuracy is the share of questions scored 1. That is SQLEnv's
# reward="skyrl" (accuracy = episodes whose outcome is success), not Spider's stricter
# multiset/order comparison ("spider_exec"), which would not reproduce their numbers.
REWARD = "skyrl"
MAX_TURNS = 5  # "evaluated in 5 turns" (SkyRL README); SQLEnv's default of 6 is for training

_SPIDER_HINT = ("'skyhub data get spider' puts the official spider_data.zip in "
                "$SKYHUB_DATA/spider/")
_NEEDS_SPIDER = " (its databases are Spider's: also run 'skyhub data get spider')"

RUNS = (
    SuiteRun("Spider-Dev", "sql-spider", {"split": "dev", "reward": REWARD},
             max_turns=MAX_TURNS,
             data_hint="Without data this runs the bundled Spider dev subset (972 of the 1034 "
                       "questions: wta_1 is missing). For the full dev set, "
                       f"{_SPIDER_HINT} (dev.json, database/)."),
    SuiteRun("Spider-Test", "sql-spider", {"split": "test", "reward": REWARD},
             max_turns=MAX_TURNS,
             data_hint=f"{_SPIDER_HINT}: the 2024 release has test.json and test_database/ "
                       "(2,147 questions)."),
    SuiteRun("Spider-Realistic", "sql-spider",
             {"variant": "spider-realistic", "split": "spider-realistic", "reward": REWARD},
             max_turns=MAX_TURNS,
             data_hint="'skyhub data get spider-realistic' (zenodo.org/records/5205322) puts "
                       "spider-realistic.json in $SKYHUB_DATA/spider-realistic/"
                       f"{_NEEDS_SPIDER}."),
    SuiteRun("Spider-DK", "sql-spider",
             {"variant": "spider-dk", "split": "Spider-DK", "reward": REWARD},
             max_turns=MAX_TURNS,
             data_hint="'skyhub data get spider-dk' (github.com/ygan/Spider-DK) puts "
                       "Spider-DK.json, tables.json and its 3 databases in database/ under "
                       f"$SKYHUB_DATA/spider-dk/{_NEEDS_SPIDER}."),
    SuiteRun("Spider-Syn", "sql-spider",
             {"variant": "spider-syn", "split": "dev", "reward": REWARD},
             max_turns=MAX_TURNS,
             data_hint="'skyhub data get spider-syn' (github.com/ygan/Spider-Syn) puts its "
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
                "Spider-Realistic, Spider-DK and Spider-Syn, 5 turns per question.",
    runs=RUNS, reference=REFERENCE, source=SOURCE)


def register() -> None:
    """Register the family's suites; the registry loads the family more than once in tests
    (and plugins may reload), so an already registered suite is replaced, not an error."""
    register_suite(SKYRL_SQL, override=True)
