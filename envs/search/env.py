"""`SearchEnv`: answer a question by searching a corpus (Search-R1's multi-turn protocol)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from skyhub.env import StepResult, TextEnv, check_protocol
from skyhub.errors import InfraError, UsageError

from . import protocol as proto
from . import tools as calls
from .qa import load_qa
from .reward import exact_match, f1


class SearchEnv(calls.SearchTools, TextEnv):
    """`<search>q</search>` shows the top-k passages; `<answer>a</answer>` is scored by EM.

    Kwargs: `data_dir` (a directory laid out as the bundled data: `corpus.jsonl` and
    `qa-<split>.jsonl`), or the files one by one: `corpus` (JSONL, default the bundled one),
    `qa` (JSONL/parquet); `index` (a directory from `skyhub search index build`), `retriever_url` (a
    Search-R1 retrieval server; then no local index is built), `topk`, `max_turns`, `split`,
    `index_backend` ("bm25s" or "tantivy"; the same one the `index` directory was built with),
    `retriever_timeout_s` and `retries` (per retrieval server request), `protocol` ("tags",
    the default: Search-R1's prompt; "tools": a prompt that describes the `search` and
    `answer` tools, tools.py; tool calls are taken under either).
    The local index is built once per process and shared by all envs on the same corpus.
    """

    stop_strings = ("</search>", "</answer>")
    # forked by state copy: the index (or retrieval server) is shared and only read
    fork_state: ClassVar[tuple[str, ...] | None] = ("_searched", "_format_errors")

    def __init__(self, *, data_dir: str | Path | None = None, corpus: str | Path | None = None,
                 index: str | Path | None = None, qa: str | Path | None = None,
                 retriever_url: str | None = None, topk: int = 3, max_turns: int = 4,
                 split: str = "dev", index_backend: str = "bm25s", dataset: str | None = None,
                 retriever_timeout_s: float = 10.0, retries: int = 3,
                 protocol: str = "tags") -> None:
        super().__init__()
        self.protocol = check_protocol(protocol)
        if topk < 1:
            raise UsageError(f"topk must be >= 1, got {topk}")
        from .index import index_class

        index_class(index_backend)  # ValueError naming the choices, even with a retriever_url
        if data_dir is not None:  # the files it holds; `corpus=`/`qa=` still override them
            d = Path(data_dir).expanduser()
            corpus = corpus if corpus is not None else d / "corpus.jsonl"
            qa = qa if qa is not None else d / f"qa-{split}.jsonl"
        self.max_turns, self.topk = max_turns, topk
        self.tasks = load_qa(qa, split=split, dataset=dataset)
        self.tools = calls.schemas()
        prompt = calls.TOOLS_SYSTEM_PROMPT if self.protocol == "tools" else proto.SYSTEM_PROMPT
        self.system_prompt = prompt.format(max_turns=max_turns)
        if retriever_url is not None:
            from .retriever import HTTPRetriever

            self.retriever: Any = HTTPRetriever(retriever_url, timeout=retriever_timeout_s,
                                                     retries=retries)
        else:
            from .index import get_index

            self.retriever = get_index(corpus=corpus, index=index, backend=index_backend)
        self._searched: list[str] = []

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task = self.start_episode(seed, options)
        self._searched = []
        self._format_errors = 0
        return task.prompt, self.make_info()

    def _breakdown(self, em: float = 0.0, f: float = 0.0) -> dict[str, float]:
        return {"em": em, "f1": f, "searches": float(len(self._searched)),
                "format_errors": float(self._format_errors)}

    def _out_of_turns(self, obs_info: dict[str, Any] | None = None) -> StepResult:
        return self.out_of_turns_step(reward_breakdown=self._breakdown(),
                                      error=f"no answer within {self.max_turns} turns",
                                      **(obs_info or {}))

    def step(self, action: str) -> StepResult:
        assert self.task is not None, "call reset() before step()"
        self.next_turn()
        m = proto.parse(action)
        if m is None:
            self._format_errors += 1
            if self.out_of_turns:
                return self._out_of_turns()
            return self._reply(proto.MALFORMED, error="malformed turn")
        if m.tag == "answer":
            answer = m.content.strip()
            gold = self.task.answer
            em, f = exact_match(answer, gold), f1(answer, gold)
            info = self.make_info("success" if em else "failure",
                                  reward_breakdown=self._breakdown(em, f), answer=answer)
            return "", em, True, False, info
        query = m.content.strip()
        self._searched.append(query)
        try:
            docs = self.retriever.search(query, self.topk) if query else []
        except InfraError as e:
            info = self.make_info("error", infra_error=True, reward_breakdown=self._breakdown(),
                                  error=str(e), query=query)
            return "", 0.0, True, False, info
        if self.out_of_turns:
            return self._out_of_turns({"query": query})
        return self._reply(proto.information(docs), query=query,
                           doc_ids=[d["id"] for d in docs])

    def _reply(self, obs: str, **extra: Any) -> StepResult:
        return f"{obs}\n{self.turns_left_note()}", 0.0, False, False, self.make_info(**extra)

    def reference_action(self) -> str | None:
        if self.task is None:
            return None
        query = self.task.meta.get("gold_title") or self.task.prompt
        if not self._searched and self.max_turns > 1:
            return f"<search>{query}</search>"
        return f"<answer>{self.task.answer[0]}</answer>"
