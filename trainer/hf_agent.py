"""`skyhub eval ENV --agent hf:PATH`: a local transformers model as an eval agent.

PATH is a model directory (`config.json` + weights), a trainer run directory (its newest
checkpoint under `checkpoints/` and the run's `tokenizer/`), or a hub id this machine can
load. The agent is registered under the entry-point group `skyhub.agents` (name `hf`), so
core finds it without importing the trainer.

It generates with the trainer's `HFEngine` (KV cache, batched): the harness calls `act` from
one thread per running episode, and a single worker thread gathers whatever requests are
waiting into one `generate` call, so `--concurrency 16` means batches of up to 16 prompts,
not 16 models. Each conversation is rendered with the tokenizer's chat template; generation
stops at the template's end-of-turn tokens. Greedy by default (temperature 0), so an eval is
deterministic.
"""

from __future__ import annotations

import hashlib
import queue
import re
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from skyhub.chat import Message
from skyhub.errors import UsageError
from skyhub.eval.agent import Agent, Reply

#: A Hugging Face hub id: NAME or ORG/NAME of letters, digits, '-', '_' and '.' (no '--'
#: or '..', no leading or trailing '-' or '.'), at most 96 characters.
_HUB_ID = re.compile(r"^(?!.*(--|\.\.))[A-Za-z0-9]([\w.-]{0,94}[A-Za-z0-9])?"
                     r"(/[A-Za-z0-9]([\w.-]{0,94}[A-Za-z0-9])?)?$")


def weights_sha256(model_dir: str | Path) -> str | None:
    """SHA-256 over a model directory's weight files (names and bytes, in name order), so a
    run records which weights it evaluated; None when there are none (a hub id)."""
    files = sorted(f for pattern in ("*.safetensors", "*.bin", "*.pt")
                   for f in Path(model_dir).glob(pattern))
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 23):
                h.update(chunk)
    return h.hexdigest()


def resolve_model_dir(path: str) -> tuple[str, str]:
    """(model directory or hub id, tokenizer directory or hub id) for `hf:PATH`."""
    p = Path(path).expanduser()
    if (p / "checkpoints").is_dir():  # a run directory: its newest checkpoint
        ckpts = sorted(p.glob("checkpoints/step_*/model"))
        if not ckpts:
            raise UsageError(f"hf:{path}: {p / 'checkpoints'} holds no step_*/model checkpoint")
        p = ckpts[-1]
    if not p.exists():
        if path.startswith((".", "/", "~")) or not _HUB_ID.match(path):
            raise UsageError(f"hf:{path}: no such directory, and not a hub id (ORG/NAME, "
                             "e.g. Qwen/Qwen2.5-0.5B-Instruct); pass a model directory (with "
                             "config.json), a `skyhub train` run directory, or a hub id")
        return path, path  # a hub id
    if not (p / "config.json").is_file():
        raise UsageError(f"hf:{path}: {p} has no config.json; pass the directory that "
                         "save_pretrained wrote (or a `skyhub train --out` directory)")
    for d in (p, *list(p.parents)[:4]):  # checkpoints/step_N/model -> the run's tokenizer/
        for cand in (d, d / "tokenizer"):
            if (cand / "tokenizer_config.json").is_file():
                return str(p), str(cand)
    raise UsageError(f"hf:{path}: no tokenizer found in {p} or a tokenizer/ folder above it")


class HFAgent(Agent):
    parallel = True  # requests from many episodes are batched by the worker thread

    def __init__(self, path: str, *, seed: int = 0, temperature: float = 0.0,
                 max_tokens: int = 512, top_p: float = 1.0, max_batch: int = 64,
                 device: str | None = None, **_: Any) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from skyhub.trainer.inference import SamplingParams, make_engine
        from skyhub.trainer.token_layout import ChatFormat

        model_dir, tok_dir = resolve_model_dir(path)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # its loading bar would cut into the eval's own
        try:
            tokenizer = AutoTokenizer.from_pretrained(tok_dir)
            model = AutoModelForCausalLM.from_pretrained(model_dir)
        except OSError as e:
            raise UsageError(f"hf:{path}: could not load ({str(e).splitlines()[0]})") from None
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.to(device or ("cuda" if torch.cuda.is_available() else "cpu")).eval()
        self.name = f"hf:{path}"
        local = Path(model_dir).is_dir()
        self._settings = {
            "path": str(Path(model_dir).resolve()) if local else model_dir,
            "weights_sha256": weights_sha256(model_dir) if local else None,
            "revision": getattr(model.config, "_commit_hash", None),
            "temperature": temperature, "max_tokens": max_tokens, "top_p": top_p}
        self.tokenizer, self.chat = tokenizer, ChatFormat(tokenizer)
        self.engine = make_engine("hf", model, tokenizer, seed=seed)
        self.params = SamplingParams(max_tokens=max_tokens, temperature=temperature,
                                     top_p=top_p, stop_token_ids=self.chat.stop_token_ids)
        self.seed, self.max_batch = seed, max_batch
        self._calls = 0
        self._requests: queue.SimpleQueue[tuple[list[int], int, Future[Reply]] | None] = (
            queue.SimpleQueue())
        self._worker = threading.Thread(target=self._serve, name="skyhub-hf-agent", daemon=True)
        self._worker.start()
        self._lock = threading.Lock()

    def settings(self) -> dict[str, Any]:
        return dict(self._settings)

    def use_stop_strings(self, stop: tuple[str, ...]) -> None:
        """End a turn at the env's stop strings too (kept in the text, as in training)."""
        from dataclasses import replace

        self.params = replace(self.params, stop=tuple(stop))

    def act(self, messages: list[Message], reference: Any) -> Reply:
        ids = self.tokenizer.apply_chat_template(messages, tokenize=True,
                                                 add_generation_prompt=True)
        if not isinstance(ids, list):  # newer transformers return a BatchEncoding
            ids = list(ids["input_ids"])
        with self._lock:
            self._calls += 1
            seed = self.seed * 1_000_003 + self._calls
        done: Future[Reply] = Future()
        self._requests.put((ids, seed, done))
        return done.result()

    def _serve(self) -> None:
        """Take every waiting request (up to max_batch) and generate them as one batch."""
        while True:
            first = self._requests.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    item = self._requests.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._requests.put(None)  # stop after this batch
                    break
                batch.append(item)
            try:
                outs = self.engine.generate([b[0] for b in batch], self.params,
                                            seeds=[b[1] for b in batch])
            except Exception as e:  # every waiting episode learns of it; the run stops
                for _, _, fut in batch:
                    fut.set_exception(e)
                continue
            for (ids, _, fut), c in zip(batch, outs, strict=True):
                text = self.tokenizer.decode(
                    [t for t in c.token_ids if t not in self.chat.stop_token_ids],
                    skip_special_tokens=False)
                fut.set_result(Reply(text, prompt_tokens=len(ids),
                                     completion_tokens=len(c.token_ids)))

    def close(self) -> None:
        if self._worker.is_alive():
            self._requests.put(None)
            self._worker.join(timeout=30)


def load(path: str, **options: Any) -> HFAgent:
    """The `skyhub.agents` entry point for `hf:PATH`."""
    return HFAgent(path, **options)
