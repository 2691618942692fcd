"""The Tinker server's state, `TinkerService`: the model host, the job queue, and each
principal's sessions, training clients, samplers and checkpoints (the routes that call it:
`routes.py`; running the server: `server.py`).

Over ~400 lines, for a reason: it is one class whose methods are the API's operations, each
with its ownership check; they share the owner tables and one lock, and auditing tenant
isolation means reading them together.

State on disk (`--state-dir`): `checkpoints/<run>/{weights,sampler_weights}/<name>/`, so a
`tinker://` path saved before a restart loads after it. Training clients themselves live in
memory; after a restart, `create_training_client_from_state(path)` resumes one.

Against a hostile client (one that knows other clients' ids):
- everything is owned by the principal that made it: the API key the request came with
  (only a digest of it is kept, and written in checkpoints). Sessions, training clients,
  samplers, request ids and checkpoints of another principal are answered as if they did
  not exist. With `--api-key` (one or more), only those keys are accepted; without, any
  `tml-` key is, and each key is its own principal (so two scripts with different keys
  cannot touch each other's models, even knowing their ids). The SDK sends no session id
  with training requests, so clients sharing a key share their models' access;
- a session may hold `max_models_per_session` training clients, and a new one is created
  only if its weights, gradients and Adam state (estimated) fit the memory free on the
  device and under `memory_limit_mb`, so that a create fails cleanly instead of the server
  running out of memory.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import logging
import re
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from skyhub.trainer.tinker.exceptions import Unsupported
from skyhub.trainer.tinker.jobs import Jobs, Outcome
from skyhub.trainer.tinker.wire import MAX_BODY

log = logging.getLogger("skyhub.tinker")
EPHEMERAL_PER_MODEL = 32  # unnamed sampler snapshots kept per training client
MAX_MODELS_PER_SESSION = 32  # training clients stay until their session ends (the SDK frees none)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def principal_of(api_key: str | None) -> str:
    """Who a request comes from: a digest of its API key (the key itself is never kept)."""
    return "p-" + hashlib.sha256((api_key or "").encode()).hexdigest()[:32]


def _keys(api_key: str | Sequence[str] | None) -> tuple[str, ...]:
    if not api_key:
        return ()
    return (api_key,) if isinstance(api_key, str) else tuple(k for k in api_key if k)

class TinkerService:
    """The server's state: the model host, the job queue, sessions and samplers."""

    def __init__(self, base_model: str, state_dir: str | Path, *, engine: str = "hf",
                 device: str | None = None, api_key: str | Sequence[str] | None = None,
                 threads: int | None = None, max_batch: int = 64,
                 session_ttl_s: float = 600.0, max_body_bytes: int = MAX_BODY,
                 max_models_per_session: int = MAX_MODELS_PER_SESSION,
                 memory_limit_mb: float | None = None) -> None:
        from skyhub.trainer.tinker.models import ModelHost, tiny_base_model

        if threads:  # CPU: small models run faster on fewer threads when the machine is busy
            import torch

            torch.set_num_threads(threads)

        if engine not in ("hf", "vllm"):
            from skyhub.errors import UsageError

            raise UsageError(f"--engine {engine!r}: use hf or vllm")
        if engine == "vllm":
            try:
                import vllm  # noqa: F401
            except ImportError:
                from skyhub.errors import MissingDependency

                raise MissingDependency("--engine vllm needs vLLM: `bash scripts/vllm-venv.sh`, "
                                        "then run the server from .venv-vllm (or use --engine "
                                        "hf)") from None
        self.state_dir = Path(state_dir)
        (self.state_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        if base_model == "tiny":  # a tiny random model, made in the state dir
            self.host = ModelHost(tiny_base_model(self.state_dir / "tiny-base"), name="tiny",
                                  device=device, engine=engine)
        else:
            self.host = ModelHost(base_model, device=device, engine=engine)
        self.api_keys = _keys(api_key)
        self.max_body_bytes = int(max_body_bytes)
        self.max_models_per_session = max_models_per_session
        if memory_limit_mb is not None:
            self.host.memory_limit = int(memory_limit_mb * 2**20)
        self.jobs = Jobs(max_batch=max_batch)
        self.sessions: dict[str, set[str]] = {}  # session id -> its model ids
        self.session_owner: dict[str, str] = {}  # session id -> the principal that made it
        self.model_owner: dict[str, str] = {}  # model id -> principal
        self.last_seen: dict[str, float] = {}  # session id -> time of its last request
        self.session_ttl_s = session_ttl_s
        #: sampler id -> (source, model_path, principal)
        self.samplers: dict[str, tuple[Any, str | None, str]] = {}
        self.ephemeral: dict[str, list[str]] = {}  # model id -> its unnamed sampler ids
        self._joins = itertools.count(1)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Stop the worker (after the job it is running) and any vLLM engine."""
        self.jobs.close()
        self.jobs.join(timeout=60)
        self.host.close()

    # ------------------------------------------------------------------ who
    def principal(self, headers: Any) -> str:
        """The principal of a request whose key `check_key` accepted."""
        return principal_of(headers.get("x-api-key"))

    def key_accepted(self, key: str | None) -> bool:
        if not self.api_keys:
            return True
        given = (key or "").encode()
        return any(hmac.compare_digest(given, k.encode()) for k in self.api_keys)

    def own_session(self, session_id: str | None, who: str) -> bool:
        with self._lock:
            return session_id is not None and self.session_owner.get(session_id) == who

    def own_model(self, model_id: str | None, who: str) -> None:
        """`Unsupported` unless `who` made `model_id`: another principal's model is answered
        like one that does not exist, in the same words."""
        with self._lock:
            mine = model_id is not None and self.model_owner.get(model_id) == who
        if not mine:
            raise Unsupported(_unknown_model(model_id))

    # ------------------------------------------------------------------ paths
    def checkpoint_dir(self, path: str, who: str) -> Path:
        """The directory of a `tinker://<run>/<kind>/<name>` checkpoint path that `who`
        saved; another principal's is answered like one that does not exist."""
        m = re.fullmatch(r"tinker://([^/]+)/(weights|sampler_weights)/([^/]+)", path or "")
        if not m:
            raise Unsupported(f"{str(path)[:300]!r} is not a checkpoint path of this server; "
                              "expected tinker://<model_id>/weights/<name> (from save_state) "
                              "or tinker://<model_id>/sampler_weights/<name>")
        run, kind, name = m.groups()
        directory = self.state_dir / "checkpoints" / quote(run, safe="") / kind / name
        if not _NAME.match(name) or run.startswith(".") \
                or not (directory / "meta.json").is_file() \
                or not self._may_read(directory, who):
            raise Unsupported(f"no checkpoint {path[:300]!r} on this server; use a path that "
                              "save_state or save_weights_for_sampler returned to you")
        return directory

    def _may_read(self, directory: Path, who: str) -> bool:
        """Whether `who` owns the checkpoint in `directory`. One saved before owners were
        recorded (no `owner` in its meta) is anyone's: the state dir was single-user then."""
        from skyhub.trainer.tinker.models import ModelHost

        try:
            owner = ModelHost.read_meta(directory).get("owner")
        except (OSError, ValueError, AttributeError):
            return False
        return owner is None or owner == who

    def new_checkpoint(self, model_id: str, kind: str, name: str | None, who: str,
                       overwrite: bool = True) -> tuple[Path, str]:
        name = name or f"{kind}-{uuid.uuid4().hex[:8]}"
        if not _NAME.match(name):
            raise Unsupported(f"checkpoint name {name[:200]!r}: use letters, digits, '.', '_' "
                              "and '-' only (at most 128)")
        directory = self.state_dir / "checkpoints" / quote(model_id, safe="") / kind / name
        if directory.exists() and (not overwrite or not self._may_read(directory, who)):
            raise Unsupported(f"checkpoint {name!r} exists; pass overwrite=True or a new name")
        return directory, f"tinker://{model_id}/{kind}/{name}"

    def list_checkpoints(self, model_id: str, who: str) -> dict[str, Any]:
        """`RestClient.list_checkpoints`: what save_state and save_weights_for_sampler wrote
        for one training run, newest first (also after a restart); `who`'s only."""
        import datetime as dt

        run = self.state_dir / "checkpoints" / quote(model_id, safe="")
        found: list[dict[str, Any]] = []
        if model_id.startswith("."):
            return {"checkpoints": found, "cursor": None}
        for kind, label in (("weights", "training"), ("sampler_weights", "sampler")):
            for meta in (run / kind).glob("*/meta.json"):
                d = meta.parent
                if not self._may_read(d, who):
                    continue
                found.append({
                    "checkpoint_id": f"{kind}/{d.name}", "checkpoint_type": label,
                    "tinker_path": f"tinker://{model_id}/{kind}/{d.name}",
                    "time": dt.datetime.fromtimestamp(meta.stat().st_mtime, dt.UTC).isoformat(),
                    "size_bytes": sum(f.stat().st_size for f in d.iterdir())})
        found.sort(key=lambda c: c["time"], reverse=True)
        return {"checkpoints": found, "cursor": None}

    # ------------------------------------------------------------------ jobs
    def submit(self, owner: str, run: Any, who: str, **extra: Any) -> dict[str, Any]:
        return {"request_id": self.jobs.submit(owner, run, principal=who), **extra}

    def owner_of(self, model_id: str) -> str:
        return model_id.split(":train:")[0]

    def _claim(self, session_id: str, model_id: str, who: str) -> str | None:
        """Reserve `model_id` for a new training client of `who`'s session: None, or why
        not (not `who`'s session; the session's cap on training clients reached)."""
        with self._lock:
            if self.session_owner.get(session_id) != who:
                return (f"unknown session {session_id[:100]!r} (it ended, or the server "
                        "restarted): make a new ServiceClient")
            claimed = self.sessions.setdefault(session_id, set())
            if model_id not in claimed and len(claimed) >= self.max_models_per_session:
                return (f"this session has {len(claimed)} training clients, the most this "
                        f"server allows (--max-models-per-session "
                        f"{self.max_models_per_session}); end the session (or use another) "
                        "to free them")
            if self.model_owner.get(model_id, who) != who:  # cannot happen: ids embed sessions
                return _unknown_model(model_id)
            claimed.add(model_id)
            self.model_owner[model_id] = who
            return None

    def _unclaim(self, session_id: str, model_id: str) -> None:
        """A training client that failed to be made gives its reservation back."""
        if model_id in self.host.models:
            return
        with self._lock:
            self.sessions.get(session_id, set()).discard(model_id)
            self.model_owner.pop(model_id, None)

    def create_model(self, req: Any, who: str) -> dict[str, Any]:
        from skyhub.trainer.tinker.models import ATTN, MLP, UNEMBED, LoraSpec

        model_id = f"{req.session_id}:train:{req.model_seq_id}"
        why = self._claim(req.session_id, model_id, who)
        if why is not None:
            return self.fail(who, why, who, model_id=model_id)
        lora = None
        if req.lora_config is not None:
            c = req.lora_config
            targets = ((ATTN if c.train_attn else ()) + (MLP if c.train_mlp else ())
                       + (UNEMBED if c.train_unembed else ()))
            lora = LoraSpec(int(c.rank), targets, c.seed)
        optimizer = getattr(req.optimizer_config, "type", "adamw")

        def run() -> Outcome:
            try:
                self.host.check_base(req.base_model)
                if optimizer != "adamw":
                    raise Unsupported(f"optimizer {optimizer!r}: this server trains with adamw")
                if lora is not None and lora.rank < 1:
                    raise Unsupported(f"LoRA rank {lora.rank}: use a rank of 1 or more")
                self.host.create(model_id, lora)
            finally:
                self._unclaim(req.session_id, model_id)
            return Outcome(json={"model_id": model_id, "type": "create_model"})

        return self.submit(req.session_id, run, who, model_id=model_id)

    def touch(self, session_id: str) -> None:
        """A session is alive (it sent a heartbeat or a request); sessions silent for longer
        than `session_ttl_s` (the SDK heartbeats every 10 s) are ended, freeing their models:
        a client that crashed does not hold its adapters forever."""
        now = time.monotonic()
        with self._lock:
            self.last_seen[session_id] = now
            self.sessions.setdefault(session_id, set())
            stale = [s for s, t in self.last_seen.items() if now - t > self.session_ttl_s]
        for s in stale:
            self.finish_session(s)

    def new_session(self, who: str) -> str:
        session_id = f"s{uuid.uuid4().hex[:16]}"
        with self._lock:
            self.session_owner[session_id] = who
        self.touch(session_id)
        return session_id

    def heartbeat(self, session_id: str, who: str) -> bool:
        """Keep `who`'s session alive; False if it is not (ended, expired, or another's)."""
        if not self.own_session(session_id, who):
            return False
        self.touch(session_id)
        return True

    def info(self, req: Any, who: str) -> dict[str, Any]:
        model_id = req.model_id
        self.own_model(model_id, who)
        model = self.host.get(model_id)
        lora = model.lora
        return {"type": "get_info", "model_id": model_id, "model_name": self.host.name,
                "is_lora": lora is not None, "lora_rank": None if lora is None else lora.rank,
                "model_data": {"arch": getattr(self.host.base.config, "model_type", None),
                               "model_name": self.host.name,
                               "tokenizer_id": self.host.tokenizer_id}}

    def _refuse_foreign(self, target: str | None, who: str, **extra: Any
                        ) -> dict[str, Any] | None:
        """A failed future for a request on a model that is not `who`'s (the same failure
        as for a model that does not exist), or None when it is."""
        try:
            self.own_model(target, who)
        except Unsupported as e:
            return self.fail(who, str(e), who, **extra)
        return None

    def forward_backward(self, call: Any, who: str) -> dict[str, Any]:
        from skyhub.trainer.tinker.wire import encode_forward_backward

        refused = self._refuse_foreign(call.model_id, who, model_id=call.model_id)
        if refused is not None:
            return refused
        owner = self.owner_of(call.model_id)
        if call.problem:
            return self.fail(owner, call.problem, who, model_id=call.model_id)

        def run() -> Outcome:
            if not call.data:
                raise Unsupported("forward_backward got no data")
            model = self.host.get(call.model_id)
            outputs, metrics = self.host.forward_backward(
                model, call.data, call.loss_fn, call.config, backward=not call.forward_only)
            return Outcome(proto=encode_forward_backward(outputs, metrics))

        return self.submit(owner, run, who, model_id=call.model_id)

    def optim_step(self, req: Any, who: str) -> dict[str, Any]:
        refused = self._refuse_foreign(req.model_id, who, model_id=req.model_id)
        if refused is not None:
            return refused
        p = req.optim_params
        if getattr(p, "type", None) not in (None, "adam", "adamw") or not hasattr(p, "beta1"):
            name = getattr(p, "type", type(p).__name__)

            def run() -> Outcome:
                raise Unsupported(f"optimizer params {name!r}: this server steps with Adam "
                                  "(types.AdamParams)")
        else:
            def run() -> Outcome:
                model = self.host.get(req.model_id)
                metrics = self.host.optim_step(model, p.learning_rate, p.beta1, p.beta2,
                                               p.eps, p.weight_decay, p.grad_clip_norm)
                return Outcome(json={"metrics": metrics})

        return self.submit(self.owner_of(req.model_id), run, who, model_id=req.model_id)

    def save_weights(self, req: Any, who: str) -> dict[str, Any]:
        refused = self._refuse_foreign(req.model_id, who, model_id=req.model_id)
        if refused is not None:
            return refused

        def run() -> Outcome:
            model = self.host.get(req.model_id)
            directory, path = self.new_checkpoint(req.model_id, "weights", req.path, who,
                                                  overwrite=bool(req.overwrite))
            self.host.save(model, directory, optimizer=True, owner=who)
            return Outcome(json={"path": path, "type": "save_weights"})

        return self.submit(self.owner_of(req.model_id), run, who, model_id=req.model_id)

    def load_weights(self, req: Any, who: str) -> dict[str, Any]:
        """Into an existing client (load_state), or a new one (create_..._from_state)."""
        if req.session_id is not None:
            model_id = f"{req.session_id}:train:{req.model_seq_id}"
            why = self._claim(req.session_id, model_id, who)
            if why is not None:
                return self.fail(who, why, who, model_id=model_id)
        elif req.model_id is not None:
            model_id = req.model_id
            refused = self._refuse_foreign(model_id, who, model_id=model_id)
            if refused is not None:
                return refused
        else:
            raise Unsupported("load_weights needs model_id, or session_id and model_seq_id")

        def run() -> Outcome:
            try:
                directory = self.checkpoint_dir(req.path, who)
                meta = self.host.read_meta(directory)
                self.host.check_base(meta["base_model"])
                if req.session_id is not None:
                    model = self.host.create(model_id, self.host.lora_of(meta))
                else:
                    model = self.host.get(model_id)
            finally:
                if req.session_id is not None:
                    self._unclaim(req.session_id, model_id)
            self.host.load(model, directory, optimizer=bool(req.optimizer))
            return Outcome(json={"path": req.path, "model_id": model_id,
                                 "type": "load_weights"})

        return self.submit(self.owner_of(model_id), run, who, model_id=model_id)

    def save_for_sampler(self, req: Any, who: str) -> dict[str, Any]:
        refused = self._refuse_foreign(req.model_id, who, model_id=req.model_id)
        if refused is not None:
            return refused
        if req.kind != "snapshot":
            kind = req.kind

            def run() -> Outcome:
                raise Unsupported(f"sampling client kind {kind!r}: this server makes snapshot "
                                  "samplers (kind='snapshot'), which see the weights saved")
            return self.submit(self.owner_of(req.model_id), run, who, model_id=req.model_id)

        def run() -> Outcome:
            model = self.host.get(req.model_id)
            if req.path is None:  # save_weights_and_get_sampling_client: in memory only
                sampler_id = self._add_sampler(self.host.snapshot(model), None, who,
                                               req.model_id)
                return Outcome(json={"sampling_session_id": sampler_id,
                                     "type": "save_weights_for_sampler"})
            directory, path = self.new_checkpoint(req.model_id, "sampler_weights", req.path,
                                                  who)
            self.host.save(model, directory, optimizer=False, owner=who)
            return Outcome(json={"path": path, "type": "save_weights_for_sampler"})

        return self.submit(self.owner_of(req.model_id), run, who, model_id=req.model_id)

    def _add_sampler(self, source: Any, model_path: str | None, who: str,
                     model_id: str | None = None) -> str:
        sampler_id = f"sampler-{uuid.uuid4().hex[:12]}"
        with self._lock:
            self.samplers[sampler_id] = (source, model_path, who)
            if model_id is not None:
                ids = self.ephemeral.setdefault(model_id, [])
                ids.append(sampler_id)
                while len(ids) > EPHEMERAL_PER_MODEL:
                    self.samplers.pop(ids.pop(0), None)
        return sampler_id

    def create_sampler(self, req: Any, who: str) -> dict[str, Any]:
        return {"type": "create_sampling_session",
                "sampling_session_id": self._add_sampler(self._path_source(req, who),
                                                         req.model_path, who)}

    def sampler(self, sampler_id: str, who: str) -> tuple[Any, str | None]:
        """`who`'s sampler: its weights and model path (another's is unknown here)."""
        with self._lock:
            found = self.samplers.get(sampler_id)
            if found is None or found[2] != who:
                raise Unsupported(f"unknown sampling session {str(sampler_id)[:100]!r} "
                                  f"(expired: this server keeps the last {EPHEMERAL_PER_MODEL} "
                                  "unnamed snapshots of a training client, or it restarted); "
                                  "save with save_weights_for_sampler(name) to keep one")
            return found[0], found[1]

    def fail(self, owner: str, message: str, who: str, **extra: Any) -> dict[str, Any]:
        """Accept a request that cannot be done: its future fails with `message`."""
        def run() -> Outcome:
            raise Unsupported(message)

        return self.submit(owner, run, who, **extra)

    def sample(self, req: Any, who: str) -> dict[str, Any]:
        """Samples are queued per sampler; the worker runs queued samples of one sampler
        with the same sampling parameters as one batched generation."""
        from skyhub.trainer.tinker.models import SampleItem

        owner = req.sampling_session_id or f"base:{who}:{req.model_path or req.base_model}"
        n = int(req.num_samples)
        ids = [uuid.uuid4().hex for _ in range(min(max(n, 0), 256))]
        try:
            if req.sampling_session_id:
                self.sampler(req.sampling_session_id, who)
            item, params = self._sample_request(req, n)
        except Unsupported as e:
            return self.fail(owner, str(e), who, sample_sequence_ids=ids)
        item = SampleItem(item, n, req.sampling_params.seed, bool(req.prompt_logprobs))
        last_n = req.prompt_logprobs_last_n

        def source() -> Any:
            if req.sampling_session_id:
                return self.sampler(req.sampling_session_id, who)[0]
            return self._path_source(req, who)

        def do(payloads: list[tuple[SampleItem, int | None]]) -> list[Outcome]:
            from skyhub.trainer.tinker.wire import encode_sample

            results = self.host.sample(source(), [item for item, _ in payloads], params)
            out = []
            for (_, keep), (seqs, plp) in zip(payloads, results, strict=True):
                if plp is not None and keep:
                    plp = [float("nan")] * (len(plp) - keep) + plp[-keep:]
                out.append(Outcome(proto=encode_sample(seqs, plp)))
            return out

        def run() -> Outcome:
            return do([(item, last_n)])[0]

        def run_batch(jobs: list[Any]) -> list[Outcome]:
            return do([job.payload for job in jobs])

        return {"request_id": self.jobs.submit(owner, run, batch_key=(owner, params),
                                               batch_run=run_batch, payload=(item, last_n),
                                               principal=who),
                "sample_sequence_ids": ids}

    def _sample_request(self, req: Any, n: int) -> tuple[list[int], Any]:
        """The prompt's tokens and the engine's sampling parameters, after checking what
        this server can do."""
        from skyhub.trainer.inference import SamplingParams

        tokens = _prompt_tokens(req.prompt)
        sp = req.sampling_params
        stop = [sp.stop] if isinstance(sp.stop, str) else list(sp.stop or [])
        if not (all(isinstance(s, str) for s in stop) or all(isinstance(s, int) for s in stop)):
            raise Unsupported("sampling_params.stop mixes strings and token ids")
        stop_ids = tuple(s for s in stop if isinstance(s, int))
        eos = self.host.tokenizer.eos_token_id
        if sp.stop is None and eos is not None:  # Tinker: no stop given = stop at EOS
            stop_ids = (int(eos),)
        if not 1 <= n <= 256:
            raise Unsupported(f"num_samples={n}: ask for 1..256 per request")
        if sp.top_k not in (-1, 0):
            raise Unsupported("sampling_params.top_k is not supported; use top_p")
        if req.topk_prompt_logprobs or req.topk_sample_logprobs or req.prompt_alt_tokens_k \
                or req.target_prompt_logprobs is not None:
            raise Unsupported("top-k logprobs, prompt_alt_tokens and target_prompt_logprobs "
                              "are not supported by this server")
        max_tokens = int(sp.max_tokens or 16)
        self.host.check_prompt(tokens, max_tokens)
        return tokens, SamplingParams(max_tokens=max_tokens, temperature=float(sp.temperature),
                                      top_p=float(sp.top_p),
                                      stop=tuple(s for s in stop if isinstance(s, str)),
                                      stop_token_ids=stop_ids)

    def _path_source(self, req: Any, who: str) -> Any:
        """The weights a request's `model_path` names (a snapshot), or None: the base."""
        if req.model_path:
            return self.host.snapshot_from(self.checkpoint_dir(req.model_path, who))
        self.host.check_base(req.base_model)
        return None

    def finish_session(self, session_id: str, who: str | None = None) -> bool:
        """Free the session's training clients and their unnamed sampler snapshots. Given
        `who`, only `who`'s session: returns whether there was one to finish."""
        with self._lock:
            if who is not None and self.session_owner.get(session_id) != who:
                return False
            self.session_owner.pop(session_id, None)
            model_ids = self.sessions.pop(session_id, set())
            self.last_seen.pop(session_id, None)
            for model_id in model_ids:
                self.model_owner.pop(model_id, None)
                for sampler_id in self.ephemeral.pop(model_id, []):
                    self.samplers.pop(sampler_id, None)

        def run() -> Outcome:
            for model_id in model_ids:
                self.host.release(model_id)
            return Outcome(json={})

        if model_ids:
            self.jobs.submit(session_id, run)
        return True


def _unknown_model(model_id: Any) -> str:
    return (f"unknown model_id {str(model_id)[:200]!r} (this server restarted, or the session "
            "ended): make a new training client, e.g. "
            "create_training_client_from_state(<last save_state path>)")



def _prompt_tokens(prompt: Any) -> list[int]:
    tokens: list[int] = []
    for chunk in prompt.chunks:
        if getattr(chunk, "type", None) != "encoded_text":
            raise Unsupported(f"prompt chunks of type {getattr(chunk, 'type', '?')!r}: this "
                              "server samples text models; send ModelInput.from_ints(tokens)")
        tokens += [int(t) for t in chunk.tokens]
    return tokens
