"""The models a Tinker server trains and samples: one base model, many clients' adapters.

Every LoRA training client is a named peft adapter on the one shared base module (so ten
clients cost ten small adapters, not ten models); a full fine-tuning client gets its own
copy of the base. All methods run on the server's single worker thread (`jobs.py`), which is
what makes switching the active adapter between requests safe.

Sampling goes through the trainer's `HFEngine` on the same module, with the adapter of the
weights being sampled switched in: a training client's latest weights, a snapshot taken by
`save_weights_for_sampler`, or the base model with adapters disabled.

Over ~400 lines, for a reason: one concept: the shared base model and the clients' adapters
on it, which train and sample through the same module.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from skyhub.trainer.policy import token_logprobs
from skyhub.trainer.tinker.exceptions import Unsupported
from skyhub.trainer.tinker.losses import get_loss
from skyhub.trainer.tinker.wire import WireDatum

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
UNEMBED = ("lm_head",)
_SNAPSHOT_KEYS = itertools.count(1)
TINY_TEXT = ("The quick brown fox jumps over the lazy dog. Tinker scripts train models. "
             "skyhub serves environments, trains agents and answers questions. "
             "0 1 2 3 4 5 6 7 8 9 + - * / = ( ) [ ] { } < > , . ; : ! ? ' \" ")


def tiny_base_model(directory: str | Path, seed: int = 0, tie_embeddings: bool = True) -> str:
    """Write a tiny random Qwen2 model and its BPE tokenizer (chat template, EOS `<|end|>`)
    to `directory` and return its path: a base model for tests and demos that needs no
    download. It learns fast on a CPU, but knows nothing to start with."""
    from skyhub.trainer.tiny import tiny_model, train_tokenizer

    out = Path(directory)
    if not (out / "tokenizer" / "tokenizer.json").is_file():
        tokenizer = train_tokenizer([TINY_TEXT] * 4)
        model = tiny_model(len(tokenizer), seed=seed, tie_embeddings=tie_embeddings)
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        # its own folder: beside a qwen2 config.json, AutoTokenizer would load it as a
        # Qwen2Tokenizer, with a pre-tokenizer that is not this BPE's
        tokenizer.save_pretrained(out / "tokenizer")
    return str(out)


@dataclass
class LoraSpec:
    rank: int
    targets: tuple[str, ...]
    seed: int | None = None

    def peft_config(self) -> Any:
        from peft import LoraConfig

        return LoraConfig(r=self.rank, lora_alpha=self.rank, target_modules=list(self.targets),
                          lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")


Sequence = tuple[list[int], list[float], str]  # sampled tokens, their logprobs, stop reason


@dataclass
class SampleItem:
    """One sample request: `n` continuations of `prompt`."""
    prompt: list[int]
    n: int
    seed: int | None
    prompt_logprobs: bool


@dataclass
class Snapshot:
    """Weights frozen for sampling (CPU tensors of the trainable parameters)."""
    lora: LoraSpec | None
    weights: dict[str, torch.Tensor]
    key: int = field(default_factory=lambda: next(_SNAPSHOT_KEYS))


@dataclass
class TrainingModel:
    model_id: str
    lora: LoraSpec | None
    module: Any  # the peft model (LoRA) or this client's own copy (full fine-tuning)
    adapter: str | None
    params: dict[str, torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    steps: int = 0
    memory_bytes: int = 0  # the estimate its creation was checked against


class ModelHost:
    """The base model and every client's trainable weights on top of it."""

    def __init__(self, base_model: str, *, name: str | None = None, device: str | None = None,
                 dtype: str = "auto", engine: str = "hf") -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = base_model  # what transformers loads
        self.name = name or base_model  # what clients call it
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = {"auto": torch.bfloat16 if self.device == "cuda" else torch.float32,
                      "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
        # a tokenizer of its own in <model>/tokenizer/ (as `tiny_base_model` writes) wins
        tok_dir = Path(base_model) / "tokenizer"
        self.tokenizer_id = str(tok_dir) if tok_dir.is_dir() else base_model
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_id)
            self.base = AutoModelForCausalLM.from_pretrained(base_model, dtype=self.dtype)
        except OSError as e:
            from skyhub.errors import UsageError

            raise UsageError(f"could not load --base-model {base_model!r} "
                             f"({str(e).splitlines()[0]}); pass a local model directory or "
                             "a hub id this machine can download") from None
        self.base.to(self.device)
        self.max_length = int(getattr(self.base.config, "max_position_embeddings", 4096))
        self.peft: Any = None  # made on the first LoRA client
        self.models: dict[str, TrainingModel] = {}
        # one scratch adapter per LoRA shape, holding the snapshot last sampled from
        self._scratch: dict[tuple[int, tuple[str, ...]], tuple[str, int]] = {}
        self._full_sampler: Any = None
        self.engine = engine
        self._vllm: Any = None  # the VLLMEngine, made on the first sample
        self._vllm_loaded: Any = None  # whose weights it holds
        self._counter = 0
        #: bytes all training clients' trainable state may take together (None: only what
        #: the device has free limits them)
        self.memory_limit: int | None = None

    # ------------------------------------------------------------------ creation
    def check_base(self, base_model: str | None) -> None:
        if base_model not in (None, "", self.name, self.path):
            raise Unsupported(f"base model {base_model!r} is not served here: this server "
                              f"serves {self.name!r}; start another with "
                              f"`skyhub tinker serve --base-model {base_model}`")

    def memory_needed(self, lora: LoraSpec | None) -> int:
        """Bytes a new training client's trainable state takes: its float32 weights (for full
        fine-tuning, a copy of the whole base), their gradients and Adam's two moments, 16
        bytes per trainable parameter. Activations are not counted: they come and go."""
        if lora is None:
            n = sum(p.numel() for name, p in self.base.named_parameters() if "lora_" not in name)
        else:
            n = sum(lora.rank * (int(m.in_features) + int(m.out_features))
                    for name, m in self.base.named_modules()
                    if name.rsplit(".", 1)[-1] in lora.targets and hasattr(m, "in_features"))
        return 16 * n

    def memory_available(self) -> int | None:
        """Bytes free for new weights on this host's device: CUDA's free memory, or the
        smaller of the machine's available memory and the cgroup's headroom; None if unknown."""
        if self.device.startswith("cuda"):
            free, _ = torch.cuda.mem_get_info(torch.device(self.device))
            return int(free)
        found: list[int] = []
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        found.append(int(line.split()[1]) * 1024)
        except OSError:
            pass
        try:
            limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
            if limit != "max":
                used = int(Path("/sys/fs/cgroup/memory.current").read_text())
                found.append(int(limit) - used)
        except (OSError, ValueError):
            pass
        return min(found) if found else None

    def check_memory(self, lora: LoraSpec | None) -> int:
        """The estimate for a new client, after checking that it fits: `Unsupported` (before
        anything is allocated) when it would take the clients past `memory_limit`, or past
        what the device has free (with a quarter to spare for activations)."""
        needed = self.memory_needed(lora)
        kind = f"LoRA rank {lora.rank}" if lora else "full fine-tuning"
        mb = needed / 2**20
        if self.memory_limit is not None:
            used = sum(m.memory_bytes for m in self.models.values())
            if used + needed > self.memory_limit:
                raise Unsupported(
                    f"no room for a {kind} training client (~{mb:.0f} MiB of weights, "
                    f"gradients and optimizer state): the clients here hold "
                    f"~{used / 2**20:.0f} of the server's {self.memory_limit / 2**20:.0f} MiB "
                    "(--memory-limit-mb); use LoRA or a smaller rank, or end other sessions")
        free = self.memory_available()
        if free is not None and needed * 1.25 > free:
            raise Unsupported(f"not enough memory for a {kind} training client: it needs "
                              f"~{mb:.0f} MiB and {free / 2**20:.0f} MiB are free on "
                              f"{self.device}; use LoRA or a smaller rank, or end other sessions")
        return needed

    def create(self, model_id: str, lora: LoraSpec | None) -> TrainingModel:
        if model_id in self.models:
            return self.models[model_id]
        needed = self.check_memory(lora)
        self._counter += 1
        try:
            if lora is None:  # full fine-tuning: a float32 copy of its own, and Adam's state
                module = self._fresh_base()
                params = {n: p for n, p in module.named_parameters()}
                adapter = None
            else:
                adapter = f"m{self._counter}"
                with torch.random.fork_rng(devices=[]):  # a seed for this adapter only
                    if lora.seed is not None:
                        torch.manual_seed(lora.seed)
                    module = self._add_adapter(adapter, lora)
                params = {n: p for n, p in module.named_parameters() if f".{adapter}." in n}
        except torch.OutOfMemoryError:
            raise Unsupported(f"no memory left for a {'LoRA' if lora else 'full fine-tuning'} "
                              "client on this machine; use LoRA (or a smaller rank), or end "
                              "other sessions") from None
        optimizer = torch.optim.AdamW(params.values(), lr=1e-4, betas=(0.9, 0.95), eps=1e-12,
                                      weight_decay=0.0)
        model = TrainingModel(model_id, lora, module, adapter, params, optimizer,
                              memory_bytes=needed)
        self.models[model_id] = model
        return model

    def _fresh_base(self) -> Any:
        from transformers import AutoModelForCausalLM

        module = AutoModelForCausalLM.from_pretrained(self.path, dtype=torch.float32)
        return module.to(self.device)

    def _add_adapter(self, name: str, lora: LoraSpec) -> Any:
        from peft import get_peft_model

        if self.peft is None:
            self.peft = get_peft_model(self.base, lora.peft_config(), adapter_name=name)
        else:
            self.peft.add_adapter(name, lora.peft_config())
        return self.peft

    def release(self, model_id: str) -> None:
        model = self.models.pop(model_id, None)
        if model is not None and model.adapter is not None:
            self.peft.delete_adapter(model.adapter)

    def get(self, model_id: str) -> TrainingModel:
        if model_id not in self.models:
            raise Unsupported(f"unknown model_id {model_id!r} (this server restarted, or the "
                              "session ended): make a new training client, e.g. "
                              "create_training_client_from_state(<last save_state path>)")
        return self.models[model_id]

    # ------------------------------------------------------------------ training
    def _activate(self, model: TrainingModel) -> Any:
        """The module to run for `model`, with its adapter switched in."""
        if model.adapter is not None:
            self.peft.set_adapter(model.adapter)
            for p in model.params.values():  # set_adapter resets requires_grad
                p.requires_grad_(True)
            return self.base  # the transformers module, with the adapter's layers injected
        return model.module

    def forward_backward(self, model: TrainingModel, data: list[WireDatum], loss_fn: str,
                         config: dict[str, float | str], *, backward: bool
                         ) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        """Sum of the per-datum losses; gradients accumulate until `optim_step`."""
        fn, needed = get_loss(loss_fn, config)
        rows = [self._check_datum(i, d, needed) for i, d in enumerate(data)]
        module = self._activate(model)
        module.train(backward)
        outputs, total = [], 0.0
        with torch.set_grad_enabled(backward):
            width = max(len(r[0]) for r in rows)
            ids = torch.full((len(rows), width), self._pad_id(), dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, (tokens, _, _) in enumerate(rows):
                ids[i, :len(tokens)] = torch.tensor(tokens)
                mask[i, :len(tokens)] = 1
            logits = module(input_ids=ids.to(self.device),
                            attention_mask=mask.to(self.device)).logits
            loss_sum = torch.zeros((), device=self.device)
            for i, (tokens, targets, inputs) in enumerate(rows):
                n = len(tokens)
                tgt = torch.tensor(targets, device=self.device)
                logp = token_logprobs(logits[i, :n], tgt)
                ins = {k: torch.tensor(v, dtype=torch.float32, device=self.device)
                       for k, v in inputs.items()}
                loss = fn(logp, ins, config)
                loss_sum = loss_sum + loss
                outputs.append({"logprobs": logp.detach().float().cpu().numpy()})
            if backward:
                loss_sum.backward()
            total = float(loss_sum.detach())
        return outputs, {"loss:sum": total}

    def _check_datum(self, i: int, d: WireDatum, needed: tuple[str, ...]
                     ) -> tuple[list[int], list[int], dict[str, np.ndarray]]:
        n = len(d.tokens)
        if n == 0:
            raise Unsupported(f"datum {i}: model_input is empty")
        if n > self.max_length:
            raise Unsupported(f"datum {i}: {n} tokens is longer than the model's context "
                              f"({self.max_length})")
        vocab = self.base.config.vocab_size
        if "target_tokens" not in d.inputs:
            raise Unsupported(f"datum {i}: loss_fn_inputs needs 'target_tokens'")
        inputs = {k: np.asarray(v).reshape(-1) for k, v in d.inputs.items()}
        for name in ("target_tokens", "weights", *needed):
            if name not in inputs:
                if name == "weights":
                    continue
                raise Unsupported(f"datum {i}: loss_fn_inputs needs {name!r}")
            if len(inputs[name]) != n:
                raise Unsupported(f"datum {i}: loss_fn_inputs[{name!r}] has "
                                  f"{len(inputs[name])} entries but model_input has {n} "
                                  "tokens; give one per input position")
        targets = inputs.pop("target_tokens").astype(np.int64).tolist()
        bad = [t for t in d.tokens + targets if not 0 <= t < vocab]
        if bad:
            raise Unsupported(f"datum {i}: token id {bad[0]} is outside the vocabulary "
                              f"(0..{vocab - 1})")
        return d.tokens, targets, inputs

    def optim_step(self, model: TrainingModel, lr: float, beta1: float, beta2: float,
                   eps: float, weight_decay: float, grad_clip_norm: float) -> dict[str, float]:
        for group in model.optimizer.param_groups:
            group.update(lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
        params = [p for p in model.params.values() if p.grad is not None]
        norm = (torch.nn.utils.clip_grad_norm_(params, grad_clip_norm or float("inf"))
                if params else torch.zeros(()))
        model.optimizer.step()
        model.optimizer.zero_grad(set_to_none=True)
        model.steps += 1
        return {"grad_norm:mean": float(norm), "learning_rate:mean": lr}

    # ------------------------------------------------------------------ weights
    def trainable_state(self, model: TrainingModel) -> dict[str, torch.Tensor]:
        """The trainable weights, keyed without the adapter's name (so a checkpoint loads
        into any adapter)."""
        key = f".{model.adapter}." if model.adapter else None
        return {(n.replace(key, ".") if key else n): p.detach().to("cpu", copy=True)
                for n, p in model.params.items()}

    def load_trainable(self, model: TrainingModel, state: dict[str, torch.Tensor]) -> None:
        _copy_into(model.params, model.adapter, state)

    def snapshot(self, model: TrainingModel) -> Snapshot:
        return Snapshot(model.lora, self.trainable_state(model))

    def save(self, model: TrainingModel, directory: Path, *, optimizer: bool,
             owner: str | None = None) -> None:
        """Write a checkpoint; `owner` (a principal, never a key) is recorded so that only
        the one who saved it may load, list or overwrite it, also after a restart."""
        directory.mkdir(parents=True, exist_ok=True)
        torch.save(self.trainable_state(model), directory / "weights.pt")
        if optimizer:
            torch.save(model.optimizer.state_dict(), directory / "optimizer.pt")
        lora = model.lora
        meta = {"base_model": self.name, "model_id": model.model_id, "steps": model.steps,
                "owner": owner,
                "lora": None if lora is None else {"rank": lora.rank,
                                                   "targets": list(lora.targets)}}
        (directory / "meta.json").write_text(json.dumps(meta, indent=1))

    @staticmethod
    def read_meta(directory: Path) -> dict[str, Any]:
        return json.loads((directory / "meta.json").read_text())

    @staticmethod
    def lora_of(meta: dict[str, Any]) -> LoraSpec | None:
        lora = meta.get("lora")
        return None if lora is None else LoraSpec(lora["rank"], tuple(lora["targets"]))

    def load(self, model: TrainingModel, directory: Path, *, optimizer: bool) -> None:
        self.load_trainable(model, torch.load(directory / "weights.pt", map_location="cpu"))
        model.optimizer.zero_grad(set_to_none=True)
        if optimizer:
            if not (directory / "optimizer.pt").is_file():
                raise Unsupported(f"{directory.name} was saved without optimizer state; "
                                  "load it without the optimizer")
            model.optimizer.load_state_dict(torch.load(directory / "optimizer.pt",
                                                       map_location="cpu"))

    def snapshot_from(self, directory: Path) -> Snapshot:
        meta = self.read_meta(directory)
        self.check_base(meta["base_model"])
        weights = torch.load(directory / "weights.pt", map_location="cpu")
        return Snapshot(self.lora_of(meta), weights)

    # ------------------------------------------------------------------ sampling
    def sampler_module(self, source: TrainingModel | Snapshot | None) -> Any:
        """A module that computes with `source`'s weights: a training client's current
        ones, a snapshot's, or (None) the base model's."""
        if source is None:
            if self.peft is not None:
                self.peft.base_model.disable_adapter_layers()
            return self.base
        if self.peft is not None:
            self.peft.base_model.enable_adapter_layers()
        if isinstance(source, TrainingModel):
            return self._activate(source)
        if source.lora is None:
            if self._full_sampler is None:
                self._full_sampler = [self._fresh_base(), 0]
            module, loaded = self._full_sampler
            if loaded != source.key:
                module.load_state_dict(source.weights, strict=False)
                self._full_sampler[1] = source.key
            return module
        shape = (source.lora.rank, source.lora.targets)
        name, loaded = self._scratch.get(shape, (f"s{len(self._scratch) + 1}", 0))
        if shape not in self._scratch:
            self._add_adapter(name, source.lora)
        if loaded != source.key:
            params = {n: p for n, p in self.peft.named_parameters() if f".{name}." in n}
            _copy_into(params, name, source.weights)
            self._scratch[shape] = (name, source.key)
        self.peft.set_adapter(name)
        return self.base

    def check_prompt(self, prompt: list[int], max_tokens: int) -> None:
        if not prompt:
            raise Unsupported("the prompt is empty")
        if len(prompt) + max_tokens > self.max_length:
            raise Unsupported(f"prompt ({len(prompt)} tokens) + max_tokens ({max_tokens}) is "
                              f"longer than the model's context ({self.max_length})")
        vocab = self.base.config.vocab_size
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise Unsupported(f"prompt token id {bad[0]} is outside the vocabulary "
                              f"(0..{vocab - 1})")

    def sample(self, source: TrainingModel | Snapshot | None, items: list[SampleItem],
               params: Any) -> list[tuple[list[Sequence], list[float] | None]]:
        """Every item's samples from one batched generation with `source`'s weights: per
        item, (sequences, prompt logprobs or None). Sample i of an item with seed s is drawn
        with seed s + i, so a seeded request gives the same samples in any batch."""
        from skyhub.trainer.inference.hf import HFEngine

        prompts, seeds = [], []
        for it in items:
            base = it.seed if it.seed is not None else int(torch.randint(0, 2**31, ()).item())
            prompts += [it.prompt] * it.n
            seeds += [base + i for i in range(it.n)]
        module = self.sampler_module(source)
        was_training = module.training
        module.eval()
        try:
            plps = [self._prompt_logprobs(module, it.prompt) if it.prompt_logprobs else None
                    for it in items]
            if self.engine == "vllm":
                done = iter(self._vllm_generate(source, prompts, params, seeds))
            else:
                done = iter(HFEngine(module, self.tokenizer).generate(prompts, params, seeds))
        finally:
            module.train(was_training)
            if source is None and self.peft is not None:
                self.peft.base_model.enable_adapter_layers()
        out = []
        for it, plp in zip(items, plps, strict=True):
            seqs = [next(done) for _ in range(it.n)]
            out.append(([(c.token_ids, c.logprobs, c.finish_reason) for c in seqs], plp))
        return out

    # ------------------------------------------------------------------ vLLM
    def _vllm_generate(self, source: TrainingModel | Snapshot | None, prompts: list[list[int]],
                       params: Any, seeds: list[int]) -> list[Any]:
        """Sample with vLLM: `source`'s weights, with its LoRA adapter merged into the base
        weights, are loaded into the engine first unless it already holds them."""
        if params.stop:
            raise Unsupported("--engine vllm samples with token-id stops only; pass "
                              "stop=[token ids] (or start the server with --engine hf)")
        if self._vllm is None:
            from skyhub.trainer.inference.vllm import VLLMEngine

            self._vllm = VLLMEngine(self.path, seed=0, max_model_len=self.max_length,
                                    dtype=str(self.dtype).removeprefix("torch."))
        if isinstance(source, TrainingModel):
            key: Any = (source.model_id, source.steps)
        else:
            key = "base" if source is None else source.key
        if key != self._vllm_loaded:
            self._vllm.update_weights(self.merged_weights(source), self._vllm.version + 1)
            self._vllm_loaded = key
        return self._vllm.generate(prompts, params, seeds)

    @torch.no_grad()
    def merged_weights(self, source: TrainingModel | Snapshot | None) -> dict[str, torch.Tensor]:
        """The base model's weights, under transformers' names, with `source`'s weights in:
        a LoRA adapter merged into the layers it wraps (W + B @ A; lora_alpha = rank makes
        the scale 1), or a full fine-tune's weights as they are."""
        if isinstance(source, TrainingModel) and source.lora is None:
            return dict(source.module.state_dict())
        if isinstance(source, Snapshot) and source.lora is None:
            return dict(source.weights)
        weights = {k.replace(".base_layer.", "."): v for k, v in self.base.state_dict().items()
                   if ".lora_" not in k}
        if source is None:
            return weights
        if "lm_head" in source.lora.targets and getattr(self.base.config,
                                                        "tie_word_embeddings", False):
            raise Unsupported("--engine vllm cannot sample a LoRA on the unembedding of a "
                              "model with tied embeddings; create the training client with "
                              "train_unembed=False (or serve with --engine hf)")
        lora = self.trainable_state(source) if isinstance(source, TrainingModel) \
            else source.weights
        for name, a in lora.items():
            if ".lora_A." not in name:
                continue
            layer = name[:name.index(".lora_A.")].removeprefix("base_model.model.")
            b = lora[name.replace(".lora_A.", ".lora_B.")]
            w = weights[f"{layer}.weight"]
            weights[f"{layer}.weight"] = w + (b.to(w) @ a.to(w))
        return weights

    def close(self) -> None:
        if self._vllm is not None:
            self._vllm.close()
            self._vllm = None

    @torch.no_grad()
    def _prompt_logprobs(self, module: Any, prompt: list[int]) -> list[float]:
        ids = torch.tensor([prompt], device=self.device)
        logits = module(input_ids=ids).logits[0, :-1]
        lp = token_logprobs(logits, ids[0, 1:]).float().cpu().tolist()
        return [float("nan"), *lp]

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else (self.tokenizer.eos_token_id or 0))



def _copy_into(params: dict[str, torch.nn.Parameter], adapter: str | None,
               state: dict[str, torch.Tensor]) -> None:
    """Copy a checkpoint's weights (keyed without an adapter name) into `params`."""
    key = f".{adapter}." if adapter else None
    names = {(n.replace(key, ".") if key else n): n for n in params}
    missing = set(names) - set(state)
    if missing or len(state) != len(names):
        raise Unsupported("checkpoint does not match this model (different LoRA rank or "
                          f"layers; {len(missing)} weights missing); load it with "
                          "create_training_client_from_state")
    with torch.no_grad():
        for short, full in names.items():
            params[full].copy_(state[short].to(params[full].device))
