"""`skyhub eval --agent openai:M --tools` against a real local HTTP server (stdlib
`http.server` in a thread) that answers with scripted `tool_calls`: the calls are played on
sql-spider's real SQLite databases and scored as the script meant (the gold query succeeds,
a wrong one fails), parallel and malformed calls included; the server sees `tools`,
`tool_choice` and `role: "tool"` messages answering its call ids; a server that rejects
`tools` turns the run to the text protocol with a note."""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import skyhub
from skyhub.cli.main import app
from skyhub.eval import harness
from skyhub.eval.openai_agent import OpenAIAgent
from skyhub.eval.rundir import load_records

Answer = Callable[[dict[str, Any]], "dict[str, Any] | tuple[int, str]"]


class ToolServer:
    """`POST /v1/chat/completions` answered by `answer(body)`: an assistant message (dict),
    or `(status, error message)`. Every body is kept in `bodies`."""

    def __init__(self, answer: Answer) -> None:
        self.answer, self.bodies, self.lock = answer, [], threading.Lock()
        state = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with state.lock:
                    state.bodies.append(body)
                out = state.answer(body)
                if isinstance(out, tuple):
                    status, payload = out[0], {"error": {"message": out[1], "code": out[0]}}
                else:
                    status, payload = 200, {
                        "id": "x", "object": "chat.completion", "model": body["model"],
                        "choices": [{"index": 0, "message": {"role": "assistant", **out},
                                     "finish_reason": "tool_calls" if out.get("tool_calls")
                                     else "stop"}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ToolServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


class SqlScript:
    """Scripted answers on sql-spider, by a hash of the question (`kind[question]`): turn 1,
    two parallel calls (the gold query and a look at the tables); then "gold" submits the
    gold query, "wrong" a query whose one row answers nothing, "malformed" first sends a
    call to an unknown tool beside one whose arguments are not JSON, then submits the gold
    query, which SkyRL-SQL's rules fail (a turn without a query after an observation breaks
    the format)."""

    KINDS = ("gold", "wrong", "malformed")

    def __init__(self) -> None:
        with skyhub.make("sql-spider", split="dev") as env:
            self.gold = {t.meta["question"]: t.answer for t in env.tasks}
        self.kind: dict[str, str] = {}
        self.seen_ids: dict[str, list[list[str]]] = {}  # question -> tool_call_ids per request

    def question(self, messages: list[dict[str, Any]]) -> str:
        user = next(m["content"] for m in messages if m["role"] == "user")
        return user.split("Question:\n", 1)[1].split("\n\n", 1)[0].strip()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        if not any(m["role"] == "user" and "Question:" in m["content"] for m in messages):
            return {"content": "OK"}  # the agent's probe
        q = self.question(messages)
        tag = f"q{zlib.crc32(q.encode()) % 10**6}"
        kind = self.kind.setdefault(q, self.KINDS[zlib.crc32(q.encode()) % 3])
        results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
        self.seen_ids.setdefault(q, []).append(results)
        if not results:
            return {"content": "Let me look first.", "tool_calls": [
                call(f"{tag}_run", "execute_sql", {"query": self.gold[q]}),
                call(f"{tag}_tables", "execute_sql",
                     {"query": "SELECT name FROM sqlite_master WHERE type = 'table'"})]}
        if kind == "malformed" and len(results) == 2:
            return {"content": "", "tool_calls": [
                call(f"{tag}_bad", "drop_database", {"name": "x"}),
                call(f"{tag}_json", "execute_sql", "{\"query\": SELECT")]}
        query = "SELECT 'a wrong answer'" if kind == "wrong" else self.gold[q]
        return {"content": None,
                "tool_calls": [call(f"{tag}_submit", "submit_solution", {"query": query})]}


def test_scripted_tool_calls_on_sql_spider_are_scored_as_meant(tmp_path: Path) -> None:
    script = SqlScript()
    out = tmp_path / "run"
    with ToolServer(script) as server:
        r = CliRunner().invoke(app, ["eval", "sql-spider", "split=dev", "--agent", "openai:M",
                                     "--base-url", server.base_url, "--tools", "--n", "8",
                                     "--max-turns", "6", "--concurrency", "4",
                                     "--out", str(out)])
    assert r.exit_code == 0, r.output
    records = load_records(out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["protocol"] == "tools" and summary["infra_errors"] == 0 and len(records) == 8
    assert json.loads((out / "run.json").read_text())["protocol"] == "tools"
    meant = {script.question([m for m in rec["messages"]]): rec for rec in records}
    assert set(meant) == set(script.kind) and set(script.kind.values()) == set(script.KINDS)
    for q, rec in meant.items():
        kind = script.kind[q]
        assert rec["outcome"] == ("success" if kind == "gold" else "failure"), (kind, q)
        tags = [[i.rsplit("_", 1)[1] for i in ids] for ids in script.seen_ids[q]]
        tool_msgs = [m for m in rec["messages"] if m["role"] == "tool"]
        assert tags[:2] == [[], ["run", "tables"]]  # both parallel calls answered by id
        assert "name" in tool_msgs[1]["content"] and "Error" not in tool_msgs[0]["content"]
        if kind == "malformed":
            assert tags[2] == ["run", "tables", "bad", "json"]
            assert "unknown tool 'drop_database'" in tool_msgs[2]["content"]
            assert "not valid JSON" in tool_msgs[3]["content"]
            assert rec["reward_breakdown"]["format"] == -1.0
        else:
            assert len(tags) == 2 and rec["turns"] == 2
    chats = [b for b in server.bodies if any("Question:" in str(m.get("content"))
                                             for m in b["messages"])]
    assert len(server.bodies) == len(chats) + 1  # and one probe
    for b in chats:
        assert [t["function"]["name"] for t in b["tools"]] == ["execute_sql", "submit_solution"]
        assert b["tool_choice"] == "auto" and "stop" not in b
        for m in b["messages"]:
            if m["role"] == "tool":
                assert set(m) == {"role", "tool_call_id", "content"}
    assert "execute_sql" in records[0]["messages"][0]["content"]  # the tools prompt


def test_a_server_that_rejects_tools_turns_the_run_to_text() -> None:
    def answer(body: dict[str, Any]) -> Any:
        if "tools" in body:
            return 400, "\"auto\" tool choice requires --enable-auto-tool-choice and " \
                        "--tool-call-parser to be set"
        return {"content": "<answer>yes</answer>"}

    notes: list[str] = []
    with ToolServer(answer) as server:
        agent = OpenAIAgent("M", base_url=server.base_url, timeout=10)
        agent.on_notice = notes.append
        summary, episodes = harness.run("toy-lookup", agent, n=3, concurrency=2)
    assert summary.protocol == "text" and summary.infra_errors == 0
    assert len(notes) == 1 and "rejected a request with `tools`" in notes[0]
    assert "enable-auto-tool-choice" in notes[0] and "text protocol" in notes[0]
    assert [("tools" in b) for b in server.bodies[:2]] == [True, False]  # the probe
    assert not any("tools" in b for b in server.bodies[2:])
    # the envs were made again with their text prompt
    assert "<lookup>" in episodes[0].system_prompt
    assert all(b.get("stop") for b in server.bodies[2:])  # the text protocol's stop strings


def test_a_400_for_something_else_keeps_the_tools() -> None:
    def answer(body: dict[str, Any]) -> Any:
        if body.get("max_tokens") == 8:
            return 400, "max_tokens is not supported with this model"
        return {"content": "", "tool_calls": [call("c1", "answer", {"value": "no"})]}

    with ToolServer(answer) as server:
        agent = OpenAIAgent("M", base_url=server.base_url, timeout=10)
        summary, episodes = harness.run("toy-arith", agent, n=2, concurrency=1)
    assert summary.protocol == "tools" and summary.infra_errors == 0
    assert all(ep.actions[0]["tool_calls"][0]["function"]["name"] == "answer"
               for ep in episodes)


def test_tools_rejected_mid_run_go_on_in_text_with_one_notice() -> None:
    seen: list[bool] = []

    def answer(body: dict[str, Any]) -> Any:
        seen.append("tools" in body)
        if "tools" in body and len(seen) > 1:  # the probe passed, later requests fail
            return 400, "tools are not enabled on this deployment"
        return {"content": "<answer>1</answer>"}

    notes: list[str] = []
    with ToolServer(answer) as server:
        agent = OpenAIAgent("M", base_url=server.base_url, timeout=10)
        agent.on_notice = notes.append
        summary, _ = harness.run("toy-arith", agent, n=3, concurrency=1)
    assert summary.protocol == "text" and summary.infra_errors == 0 and summary.n == 3
    assert len(notes) == 1 and "going on in text" in notes[0]
