"""A client for Search-R1's retrieval server (`search_r1/search/retrieval_server.py`).

    POST http://127.0.0.1:8000/retrieve
    {"queries": ["..."], "topk": 3, "return_scores": true}
    -> {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 1.2},
                    ...]]}

Without scores the server returns the documents themselves, so each item may be a document
or `{"document": ..., "score": ...}`. Only the standard library is used. A server that cannot
be reached after the retries raises `InfraError`: the env marks the episode `infra_error`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from skyhub.errors import InfraError


def parse_results(payload: Any) -> list[list[dict[str, Any]]]:
    """The per-query document lists of a server response, each doc `{"id", "contents",
    "score"}`; tolerant of the scored and unscored shapes."""
    if not isinstance(payload, dict) or not isinstance(payload.get("result"), list):
        raise InfraError(f"retriever reply has no 'result' list: {str(payload)[:200]}")
    out = []
    for per_query in payload["result"]:
        docs = []
        for item in per_query or []:
            if not isinstance(item, dict):
                continue
            doc = item.get("document", item)
            if not isinstance(doc, dict):
                continue
            contents = doc.get("contents")
            if contents is None:
                title, text = doc.get("title"), doc.get("text", "")
                contents = f'"{title}"\n{text}' if title else str(text)
            docs.append({"id": str(doc.get("id", "")), "contents": str(contents),
                         "score": item.get("score")})
        out.append(docs)
    return out


class HTTPRetriever:
    """`search(query, k)` against a Search-R1 retrieval server, with timeout and retries."""

    def __init__(self, url: str, *, timeout: float = 10.0, retries: int = 3,
                 backoff: float = 0.5) -> None:
        self.url, self.timeout, self.retries, self.backoff = url, timeout, retries, backoff

    def search_many(self, queries: list[str], k: int = 3) -> list[list[dict[str, Any]]]:
        body = json.dumps({"queries": queries, "topk": k, "return_scores": True}).encode()
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            req = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    payload = json.loads(resp.read().decode("utf-8"))
                return parse_results(payload)
            except urllib.error.HTTPError as e:
                last = e
                if 400 <= e.code < 500:  # our request is wrong: retrying will not help
                    break
            except (urllib.error.URLError, OSError, TimeoutError, ValueError) as e:
                last = e
        raise InfraError(f"retriever at {self.url} failed after {self.retries + 1} attempt(s): "
                         f"{last}. Is the retrieval server running (Search-R1's "
                         f"retrieval_launch.sh)?")

    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        results = self.search_many([query], k)
        return results[0][:k] if results else []
