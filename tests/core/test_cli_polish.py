"""What a user sees first: help without type noise, tables that fit 80
columns, data errors that say what is missing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyhub.cli.main import app

SKYHUB = str(Path(sys.executable).parent / "skyhub")


@pytest.mark.parametrize("command", [["eval", "run"], ["eval", "compare"], ["replay"],
                                     ["check"], ["search", "index", "build"]])
def test_help_has_no_type_noise_and_fits_80_columns(command: list[str]) -> None:
    r = subprocess.run([SKYHUB, *command, "--help"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "COLUMNS": "80", "NO_COLOR": "1"})
    assert r.returncode == 0, r.stderr
    for noise in ("<bool>", "<str>", "<path>", "<list[str]>"):
        assert noise not in r.stdout, (noise, r.stdout)
    assert not re.search(r"\{[a-z_]+\}", r.stdout), r.stdout  # typer's {env_id}
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    assert "…" not in r.stdout  # nothing cut off


def test_usage_line_names_arguments_in_capitals() -> None:
    r = subprocess.run([SKYHUB, "eval", "run", "--help"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "COLUMNS": "100", "NO_COLOR": "1"})
    assert "skyhub eval run [OPTIONS] ENV_ID [KWARGS]..." in r.stdout


def test_compare_table_fits_80_columns(tmp_path: Path) -> None:
    for agent in ("oracle", "random"):
        r = CliRunner().invoke(app, ["eval", "toy-lookup", "-a", agent, "--n", "12",
                                     "--out", str(tmp_path / f"run-of-{agent}"), "--no-report"])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["eval", "compare", str(tmp_path / "run-of-oracle"),
                                 str(tmp_path / "run-of-random")], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "McNemar" in r.output and max(len(x) for x in r.output.splitlines()) <= 80


def test_index_build_names_what_a_corpus_row_lacks(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "a", "contents": "fine"}) + "\n"
                      + json.dumps({"id": "b", "body": "no contents here"}) + "\n")
    r = CliRunner().invoke(app, ["search", "index", "build", str(corpus), str(tmp_path / "idx")])
    assert r.exit_code == 2
    assert f"{corpus}:2" in r.output and "contents" in r.output and "body" in r.output
