"""search-qa with the tantivy backend: ranking, hostile queries, the CLI, an episode."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import skyhub
from skyhub.cli.main import app

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
pytest.importorskip("tantivy")

from search_data import PLANTED, TASK

from skyhub.envs.search.index import get_index, index_class, iter_corpus
from skyhub.envs.search.index_tantivy import TantivyIndex, sanitize_query

HOSTILE = ['"unbalanced quote', 'Zorblat "Quintessa', "(((Zorblat", "Zorblat))) AND",
           "Zorblat AND", "AND", "OR NOT", "NOT Zorblat", "title:Zorblat", "id:planted",
           "nofield:value", "contents:", ":", "", "   ", "+-!^~*?\\/[]{}<>", "Zorblat~2",
           "lighthouse^3 [a TO z]", "x" * 10_000, "Zorblat " * 2000, "Quintessa IN [a b]",
           "Zorblät Quintéssa 灯台 маяк 🌕", "\x00\x01\n\t", "/regex.*/", "'single' `tick`"]




@pytest.fixture
def index(corpus: Path) -> TantivyIndex:
    return TantivyIndex.build(list(iter_corpus(corpus)))


def test_planted_document_is_top_hit(index: TantivyIndex) -> None:
    hits = index.search("who built the Zorblat Quintessa lighthouse", 3)
    assert hits[0]["id"] == "planted"
    assert hits[0]["contents"] == PLANTED["contents"]
    assert set(hits[0]) == {"id", "contents", "score"} and hits[0]["score"] > 0
    assert 1 <= len(hits) <= 3


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_queries_never_raise(index: TantivyIndex, query: str) -> None:
    hits = index.search(query, 3)
    assert isinstance(hits, list) and len(hits) <= 3
    assert all(set(h) == {"id", "contents", "score"} for h in hits)


def test_hostile_query_with_real_words_still_finds_the_passage(index: TantivyIndex) -> None:
    assert index.search('"Zorblat (Quintessa AND', 1)[0]["id"] == "planted"
    assert index.search("title:Zorblat", 1)[0]["id"] == "planted"
    assert sanitize_query('a:"b" (C) AND') == "a b c and"


def test_unknown_backend_is_a_value_error_naming_the_choices(corpus: Path) -> None:
    with pytest.raises(ValueError, match="bm25s, tantivy"):
        index_class("lucene")
    with pytest.raises(ValueError, match="tantivy"):
        get_index(corpus=corpus, backend="lucene")
    with pytest.raises(ValueError, match="tantivy"):
        skyhub.make("search-qa", corpus=str(corpus), index_backend="lucene")


def test_cli_build_round_trip(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "idx"
    result = CliRunner().invoke(app, ["search", "index", "build", str(corpus), str(out),
                                      "--backend", "tantivy"])
    assert result.exit_code == 0, result.output
    assert "tantivy" in result.output and (out / "meta.json").is_file()
    loaded = TantivyIndex.load(out)
    assert loaded.search("Zorblat Quintessa", 1)[0]["id"] == "planted"
    env = skyhub.make("search-qa", index=str(out), index_backend="tantivy")
    env.reset(seed=0, options={"task": TASK})
    obs, *_ = env.step("<search>Zorblat Quintessa lighthouse</search>")
    assert obs.startswith("<information>Doc 1(Title: Zorblat Quintessa) Zorblat Quintessa is")
    _, reward, term, _, _ = env.step("<answer>Mirela Vantongeren</answer>")
    assert (reward, term) == (1.0, True)


def test_cli_unknown_backend_is_a_red_error(corpus: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["search", "index", "build", str(corpus), str(tmp_path / "i"),
                                      "--backend", "lucene"])
    assert result.exit_code == 2
    assert "bm25s, tantivy" in result.output


def test_loading_a_bm25s_dir_as_tantivy_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no tantivy index"):
        TantivyIndex.load(tmp_path)


def test_episode_with_reference_actions_scores_one(corpus: Path) -> None:
    env = skyhub.make("search-qa", corpus=str(corpus), index_backend="tantivy")
    env.reset(seed=0, options={"task": TASK})
    out = None
    for _ in range(env.max_turns):
        action = env.reference_action()
        assert action is not None
        out = env.step(action)
        if out[2] or out[3]:
            break
    assert out is not None
    _, reward, term, _, info = out
    assert (reward, term, info["outcome"]) == (1.0, True, "success")
    assert isinstance(env.retriever, TantivyIndex)
