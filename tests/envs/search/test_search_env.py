"""search-qa: search, read passages, answer; local BM25, the index CLI and the HTTP retriever."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

import skyhub
from skyhub.cli.main import app
from skyhub.eval.checks import check_env

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
pytest.importorskip("bm25s")

from search_data import PLANTED, TASK

from skyhub.envs.search.index import BM25Index, iter_corpus
from skyhub.envs.search.passage import split_title


def play(env, actions: list[str]):
    env.reset(seed=0, options={"task": TASK})
    out = None
    for a in actions:
        out = env.step(a)
        if out[2] or out[3]:
            break
    return out


def test_titles_are_read_quoted_or_plain() -> None:
    assert split_title('"The Title"\nsome text') == ("The Title", "some text")
    assert split_title("Plain Title\nsome text") == ("Plain Title", "some text")


def test_planted_document_is_top_hit_for_a_query_about_it(corpus: Path) -> None:
    index = BM25Index.build(list(iter_corpus(corpus)))
    hits = index.search("who built the Zorblat Quintessa lighthouse", 3)
    assert hits[0]["id"] == "planted"
    assert len(hits) <= 3


def test_search_then_correct_answer_scores_one(corpus: Path) -> None:
    env = skyhub.make("search-qa", corpus=str(corpus))
    env.reset(seed=0, options={"task": TASK})
    obs, reward, term, trunc, info = env.step("<think>look</think><search>Zorblat Quintessa"
                                              "</search>")
    assert obs.startswith("<information>Doc 1(Title: Zorblat Quintessa) Zorblat Quintessa is")
    assert (reward, term, trunc) == (0.0, False, False)
    obs, reward, term, trunc, info = env.step("<answer> mirela vantongeren. </answer>")
    assert (reward, term, trunc) == (1.0, True, False)
    assert info["outcome"] == "success" and info["reward_breakdown"]["em"] == 1.0


def test_wrong_answer_scores_zero_with_partial_f1(corpus: Path) -> None:
    env = skyhub.make("search-qa", corpus=str(corpus))
    _, reward, term, _, info = play(env, ["<answer>Mirela Smith</answer>"])
    assert (reward, term, info["outcome"]) == (0.0, True, "failure")
    assert info["reward_breakdown"]["em"] == 0.0
    assert info["reward_breakdown"]["f1"] == pytest.approx(0.5)


def test_malformed_turn_explains_the_protocol() -> None:
    env = skyhub.make("search-qa")
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step("I think the answer is 42")
    assert "<search>" in obs and "<answer>" in obs
    assert (reward, term, trunc, info["infra_error"]) == (0.0, False, False, False)


def test_running_out_of_turns_truncates_with_zero_reward() -> None:
    env = skyhub.make("search-qa", max_turns=2)
    env.reset(seed=0)
    assert env.step("<search>anything</search>")[2:4] == (False, False)
    _, reward, term, trunc, info = env.step("<search>more</search>")
    assert (reward, term, trunc, info["outcome"]) == (0.0, False, True, "failure")
    assert info["reward_breakdown"]["em"] == 0.0


def test_check_env_passes_with_reference_actions() -> None:
    assert check_env("search-qa").ok


def test_index_build_cli_round_trip(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "idx"
    result = CliRunner().invoke(app, ["search", "index", "build", str(corpus), str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "params.index.json").is_file()
    env = skyhub.make("search-qa", index=str(out), corpus=str(corpus))
    _, reward, *_ = play(env, ["<search>Zorblat Quintessa lighthouse</search>",
                               "<answer>Mirela Vantongeren</answer>"])
    assert reward == 1.0
    assert "Zorblat" in env.retriever.search("Zorblat Quintessa", 1)[0]["contents"]


def test_index_build_cli_missing_corpus_is_a_red_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["search", "index", "build", str(tmp_path / "nope.jsonl"),
                                      str(tmp_path / "idx")])
    assert result.exit_code == 2
    assert "corpus not found" in result.output


# ---------------------------------------------------------------- HTTP retriever
@pytest.fixture
def server() -> Iterator[tuple[str, list[dict]]]:
    """A local server answering in the shape of Search-R1's retrieval_server.py."""
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            result = [[{"document": PLANTED, "score": 9.5},
                       {"document": {"id": "x", "contents": '"Other"\nunrelated'}, "score": 1.0}
                       ][: body["topk"]] for _ in body["queries"]]
            data = json.dumps({"result": result}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/retrieve", seen
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_http_retriever_speaks_search_r1s_api(server) -> None:
    url, seen = server
    env = skyhub.make("search-qa", retriever_url=url, topk=2)
    env.reset(seed=0, options={"task": TASK})
    obs, *_ = env.step("<search>Zorblat</search>")
    assert seen == [{"queries": ["Zorblat"], "topk": 2, "return_scores": True}]
    assert obs.startswith("<information>Doc 1(Title: Zorblat Quintessa)")
    assert "Doc 2(Title: Other) unrelated" in obs
    _, reward, term, _, _ = env.step("<answer>Mirela Vantongeren</answer>")
    assert (reward, term) == (1.0, True)


def test_http_retriever_accepts_unscored_documents() -> None:
    from skyhub.envs.search.retriever import parse_results

    docs = parse_results({"result": [[PLANTED]]})
    assert docs[0][0]["id"] == "planted" and docs[0][0]["score"] is None


def test_unreachable_retriever_marks_the_episode_infra_error() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = skyhub.make("search-qa", retriever_url=f"http://127.0.0.1:{port}/retrieve",
                      retries=1, retriever_timeout_s=2)
    env.reset(seed=0)
    _, reward, term, _, info = env.step("<search>anything</search>")
    assert info["infra_error"] is True and info["outcome"] == "error"
    assert term and reward == 0.0
    assert "retriever" in info["error"]
