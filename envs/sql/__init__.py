"""Text-to-SQL envs (SkyRL-SQL's multi-turn protocol) on SQLite, DuckDB and PostgreSQL.

    env = skyhub.make("sql-spider")                       # bundled Spider dev subset
    env = skyhub.make("sql-spider", data_dir="~/data/spider", split="train")
    env = skyhub.make("sql-synth", difficulty="medium")   # generated, offline, endless
    env = skyhub.make("sql-spider", protocol="skyrl-eval")  # SkyRL-SQL's evaluation, scored
                                                          # with Spider's official exec match

Registration only: nothing heavy is imported until an env is made. The family's evaluation
suite (`skyrl-sql`, SkyRL-SQL's Spider table under its evaluation protocol:
envs/sql/suites.py) registers here too.
"""

from skyhub.registry import register

from .suites import register as _register_suites  # dataclasses only

_EP = "skyhub.envs.sql.env:SQLEnv"
_TAGS = ("sql", "multi-turn", "tool-use")

register("sql-spider", _EP, kwargs={"dataset": "spider"}, tags=(*_TAGS, "offline"),
         description="Spider (and variants with its layout); a dev subset is bundled.")
register("sql-bird", _EP, kwargs={"dataset": "bird"}, tags=_TAGS,
         description="BIRD: questions with external knowledge (evidence).")
register("sql-synsql", _EP, kwargs={"dataset": "synsql", "split": "train"}, tags=_TAGS,
         description="SynSQL-2.5M (OmniSQL's format).")
register("sql-skyrl653", _EP, kwargs={"dataset": "skyrl653", "split": "train"}, tags=_TAGS,
         description="SkyRL-SQL's 653 training examples (parquet; SynSQL and Spider dbs).")
register("sql-synth", _EP, kwargs={"dataset": "synth", "split": "train"},
         tags=(*_TAGS, "offline", "synthetic"),
         description="Generated databases, questions and gold SQL: endless, no download.")

_register_suites()
