"""`skyhub tinker serve` against a hostile client: huge bodies, another client's
ids, sessions that create models without end. The attacker speaks plain HTTP (httpx) to a
real server on 127.0.0.1; the victim is the official SDK. One small server (a tiny random
model on the CPU) serves the module; bodies are capped at 1 MiB there so the attacks stay
small."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
tinker = pytest.importorskip("tinker")
httpx = pytest.importorskip("httpx")

from tinker import types  # noqa: E402
from tinker.proto.request_conv import forward_backward_request_to_proto  # noqa: E402

from skyhub.trainer.tinker import TinkerServerThread  # noqa: E402

pytestmark = pytest.mark.hostile

VICTIM, ATTACKER = "tml-victim-1f2e", "tml-attacker-9a8b"
LIMIT = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    state = tmp_path_factory.mktemp("tinker-hostile")
    with TinkerServerThread("tiny", state, threads=1, max_body_bytes=LIMIT,
                            max_models_per_session=3, memory_limit_mb=2) as srv:
        yield srv


@pytest.fixture(scope="module")
def victim(server: Any) -> Iterator[dict[str, Any]]:
    """A victim's session with a trained LoRA client, a saved state and sampler weights."""
    sc = tinker.ServiceClient(base_url=server.url, api_key=VICTIM)
    tc = sc.create_lora_training_client(base_model="tiny", rank=2).result()
    data = [datum([5, 6, 7, 8])]
    tc.forward_backward(data, "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    state = tc.save_state("ck").result().path
    sampler_path = tc.save_weights_for_sampler("smp").result().path
    sampler = tc.save_weights_and_get_sampling_client().result()
    yield {"sc": sc, "tc": tc, "data": data, "state": state, "sampler_path": sampler_path,
           "sampler": sampler, "session": sc.holder.get_session_id()}
    with contextlib.suppress(Exception):
        sc.close("success").result(timeout=20)


def datum(tokens: list[int]) -> types.Datum:
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                       loss_fn_inputs={"target_tokens": tokens[1:]})


def logprobs(tc: Any, data: list[types.Datum]) -> np.ndarray:
    out = tc.forward(data, "cross_entropy").result()
    return np.concatenate([o["logprobs"].to_numpy() for o in out.loss_fn_outputs])


class Raw:
    """A client that speaks the protocol by hand, with its own key (closed at the end of the
    test that made it)."""

    made: ClassVar[list[Raw]] = []

    def __init__(self, url: str, key: str) -> None:
        self.http = httpx.Client(base_url=url + "/api/v1", headers={"X-API-Key": key},
                                 timeout=60)
        Raw.made.append(self)

    def post(self, route: str, body: Any) -> httpx.Response:
        if isinstance(body, bytes):
            return self.http.post(route, content=body,
                                  headers={"Content-Type": "application/x-protobuf"})
        if hasattr(body, "model_dump"):
            body = body.model_dump(mode="json", exclude_none=True)
        return self.http.post(route, json=body)

    def new_session(self) -> str:
        r = self.post("/create_session", {"tags": [], "user_metadata": None,
                                          "sdk_version": "0", "type": "create_session"})
        assert r.status_code == 200, r.text
        return r.json()["session_id"]

    def result(self, reply: httpx.Response) -> dict[str, Any]:
        """The outcome of an accepted request (polling as the SDK does)."""
        assert reply.status_code == 200, reply.text
        request_id = reply.json()["request_id"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            r = self.http.post("/retrieve_future", json={"request_id": request_id})
            if r.status_code != 408:
                assert r.status_code == 200, r.text
                if r.headers.get("content-type", "").startswith("application/x-protobuf"):
                    return {"proto": r.content}
                return r.json()
        raise AssertionError(f"request {request_id} never finished")


@pytest.fixture(autouse=True)
def _close_raw_clients() -> Iterator[None]:
    yield
    while Raw.made:
        Raw.made.pop().http.close()


def failed(outcome: dict[str, Any]) -> str:
    assert "error" in outcome, outcome
    return outcome["error"]


# ------------------------------------------------------------------------ bodies
def test_a_body_over_the_limit_is_refused_before_it_is_sent(server: Any) -> None:
    """The attack: `Content-Length: 1.5 GB`. The 413 comes back while the client has sent
    nothing but headers: the server did not wait for, let alone buffer, the body."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"POST /api/v1/forward_backward HTTP/1.1\r\nHost: x\r\n"
                  b"X-API-Key: " + ATTACKER.encode() + b"\r\n"
                  b"Content-Type: application/x-protobuf\r\n"
                  b"Content-Length: 1500000000\r\n\r\n" + b"\0" * 1024)
        reply = b""
        while chunk := s.recv(4096):  # the server closes after its answer
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"--max-body-mb" in reply


def test_chunked_compressed_and_sparse_bodies_cannot_grow_past_the_limit(server: Any) -> None:
    import zstandard

    raw = Raw(server.url, ATTACKER)

    def chunks() -> Iterator[bytes]:
        for _ in range(4 * LIMIT // 65536):
            yield b"\0" * 65536

    r = raw.http.post("/forward_backward", content=chunks(),
                      headers={"Content-Type": "application/x-protobuf"})
    assert r.status_code == 413, r.text
    r = raw.http.post("/asample", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    # a zstd bomb: a few hundred bytes that declare 8 MiB
    bomb = zstandard.ZstdCompressor().compress(b"\0" * (8 * LIMIT))
    assert len(bomb) < 4096
    r = raw.http.post("/forward_backward", content=bomb,
                      headers={"Content-Type": "application/x-protobuf",
                               "Content-Encoding": "zstd"})
    assert r.status_code == 413 and "decompresses" in r.text, r.text
    # a sparse tensor whose declared shape (1 GiB dense) is the client's word only
    from tinker.proto import tinker_public_pb2 as pb

    msg = forward_backward_request_to_proto(types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=[datum([5, 6, 7])],
                                                          loss_fn="cross_entropy"),
        model_id="x:train:0", seq_id=1))
    t = msg.data[0].loss_fn_inputs["weights"]
    t.dtype = pb.DTYPE_FLOAT32
    t.shape[:] = [1 << 14, 1 << 14]
    t.sparse_csr.crow_indices = np.zeros(3, np.int64).tobytes()
    r = raw.post("/forward_backward", msg.SerializeToString())
    assert r.status_code == 400 and "limit" in r.text, r.text


# ------------------------------------------------------------------------ ownership
def test_another_key_cannot_touch_a_model_knowing_its_ids(server: Any, victim: dict) -> None:
    """The attack: knowing only the victim's model_id (it is in every tinker:// path),
    step its model with lr 10, overwrite its checkpoint, load it, sample it, list it, poll
    its futures, end its session. Each is answered as if the thing did not exist."""
    tc, data = victim["tc"], victim["data"]
    model_id = tc.model_id
    before = logprobs(tc, data)
    ck = Path(server.service.state_dir) / "checkpoints" / quote(model_id, safe="") / \
        "weights" / "ck"
    saved = (ck / "weights.pt").read_bytes()
    raw = Raw(server.url, ATTACKER)
    unknown = failed(raw.result(raw.post("/optim_step", types.OptimStepRequest(
        optim_params=types.AdamParams(learning_rate=1.0), model_id="nobody:train:0"))))

    step = raw.post("/optim_step", types.OptimStepRequest(
        optim_params=types.AdamParams(learning_rate=10.0), model_id=model_id))
    assert failed(raw.result(step)) == unknown.replace("nobody:train:0", model_id)
    fb = forward_backward_request_to_proto(types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=data, loss_fn="cross_entropy"),
        model_id=model_id, seq_id=1))
    assert "unknown model_id" in failed(raw.result(raw.post("/forward_backward",
                                                             fb.SerializeToString())))
    for route, body in (
            ("/save_weights", types.SaveWeightsRequest(model_id=model_id, path="ck",
                                                       overwrite=True)),
            ("/save_weights_for_sampler", types.SaveWeightsForSamplerRequest(
                model_id=model_id, path="smp")),
            ("/load_weights", types.LoadWeightsRequest(model_id=model_id, optimizer=True,
                                                       path=victim["state"]))):
        assert "unknown model_id" in failed(raw.result(raw.post(route, body))), route
    r = raw.post("/get_info", {"model_id": model_id, "type": "get_info"})
    assert r.status_code == 400 and "unknown model_id" in r.text

    # the attacker's own session cannot load the victim's checkpoint or sampler weights
    mine = raw.new_session()
    load = raw.post("/load_weights", types.LoadWeightsRequest(optimizer=False,
        session_id=mine, model_seq_id=0, path=victim["state"]))
    assert "no checkpoint" in failed(raw.result(load))
    for path in (victim["state"], victim["sampler_path"]):
        r = raw.post("/create_sampling_session", types.CreateSamplingSessionRequest(
            session_id=mine, sampling_session_seq_id=0, model_path=path))
        assert r.status_code == 400 and "no checkpoint" in r.text, r.text
    prompt = types.ModelInput.from_ints([5, 6])
    params = types.SamplingParams(max_tokens=2, temperature=0.0)
    for kw in ({"sampling_session_id": victim["sampler"]._sampling_session_id},
               {"model_path": victim["sampler_path"]}):
        r = raw.post("/asample", types.SampleRequest(prompt=prompt, sampling_params=params,
                                                     **kw))
        assert failed(raw.result(r)), kw
    assert raw.http.get(f"/training_runs/{model_id}/checkpoints").json()["checkpoints"] == []
    # nor create models in the victim's session, keep it alive, or end it
    r = raw.post("/create_model", types.CreateModelRequest(
        session_id=victim["session"], model_seq_id=7, base_model="tiny",
        lora_config=types.LoraConfig(rank=2)))
    assert "unknown session" in failed(raw.result(r))
    r = raw.post("/session_heartbeat", {"session_id": victim["session"],
                                        "type": "session_heartbeat"})
    assert r.status_code == 410
    assert raw.http.post(f"/sessions/{victim['session']}/finish").status_code == 204
    # nor read the victim's futures (a request id, as if sniffed from a log)
    theirs = Raw(server.url, VICTIM)
    accepted = theirs.post("/save_weights", types.SaveWeightsRequest(model_id=model_id,
                                                                     path="ck2"))
    rid = accepted.json()["request_id"]
    r = raw.http.post("/retrieve_future", json={"request_id": rid})
    assert r.status_code == 404 and "unknown request id" in r.text
    assert theirs.result(accepted)["path"].endswith("/weights/ck2")

    # the victim is untouched: same weights, same checkpoint, still training
    np.testing.assert_array_equal(logprobs(tc, data), before)
    assert (ck / "weights.pt").read_bytes() == saved
    listed = victim["sc"].create_rest_client().list_checkpoints(model_id).result().checkpoints
    assert {victim["state"], victim["sampler_path"]} <= {c.tinker_path for c in listed}
    tc.forward_backward(data, "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert not np.array_equal(logprobs(tc, data), before)
    # the key is the credential: another client with the victim's key is the victim
    same = tinker.ServiceClient(base_url=server.url, api_key=VICTIM)
    try:
        assert same.create_training_client_from_state(victim["state"]).result()
    finally:
        with contextlib.suppress(Exception):
            same.close("success").result(timeout=20)


def test_no_route_answers_without_the_key(tmp_path: Path) -> None:
    with TinkerServerThread("tiny", tmp_path, threads=1, api_key=("tml-a", "tml-b")) as srv:
        for route in ("/openapi.json", "/docs", "/redoc", "/api/v1/get_server_capabilities"):
            r = httpx.get(srv.url + route, timeout=30)
            assert r.status_code in (401, 404), (route, r.status_code)
            assert "supported_models" not in r.text and "openapi" not in r.text.lower()
        r = httpx.get(srv.url + "/api/v1/get_server_capabilities?api_key=tml-a", timeout=30)
        assert r.status_code == 401
        for key in ("tml-a", "tml-b"):  # one key per tenant
            r = httpx.get(srv.url + "/api/v1/get_server_capabilities",
                          headers={"X-API-Key": key}, timeout=30)
            assert r.status_code == 200


# ------------------------------------------------------------------------ caps
def test_models_per_session_are_capped_and_memory_is_checked_first(server: Any) -> None:
    sc = tinker.ServiceClient(base_url=server.url, api_key="tml-greedy")
    try:
        clients = [sc.create_lora_training_client(base_model="tiny", rank=2).result()
                   for _ in range(3)]
        session = sc.holder.get_session_id()
        with pytest.raises(tinker.RequestFailedError, match="most this server allows"):
            sc.create_lora_training_client(base_model="tiny", rank=2).result()
        assert clients[0].forward([datum([5, 6, 7])], "cross_entropy").result()
        # full fine-tuning (~5 MiB of weights, gradients and Adam state) is over the
        # server's 2 MiB: refused before anything is allocated
        raw = Raw(server.url, "tml-greedy-2")
        n_models = len(server.service.host.models)
        full = raw.post("/create_model", types.CreateModelRequest(
            session_id=raw.new_session(), model_seq_id=0, base_model="tiny"))
        message = failed(raw.result(full))
        assert "no room for a full fine-tuning" in message and "MiB" in message
        assert len(server.service.host.models) == n_models
    finally:
        with contextlib.suppress(Exception):
            sc.close("success").result(timeout=20)
    # the session's end frees its clients (and their claims on the cap)
    deadline = time.monotonic() + 60
    while [m for m in server.service.host.models if m.startswith(session)]:
        assert time.monotonic() < deadline, "the session's training clients were not freed"
        time.sleep(0.05)
    assert session not in server.service.sessions


# ------------------------------------------------------------------------ load
def test_many_sessions_at_once_and_idle_sockets_leave_everyone_served(server: Any) -> None:
    socks = []
    try:
        for i in range(30):  # idle TCP, half a request, or a body announced and never sent
            s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            if i % 3 == 1:
                s.sendall(b"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\n")
            elif i % 3 == 2:
                s.sendall(b"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\n"
                          b"X-API-Key: tml-idle\r\nContent-Length: 1000\r\n\r\n{")
            socks.append(s)
        results: dict[int, float] = {}
        errors: list[BaseException] = []

        def client(k: int) -> None:
            try:
                sc = tinker.ServiceClient(base_url=server.url, api_key=f"tml-load-{k}")
                try:
                    tc = sc.create_lora_training_client(base_model="tiny", rank=2).result()
                    out = tc.forward([datum([5, 6, 7 + k % 3])], "cross_entropy").result()
                    results[k] = out.metrics["loss:sum"]
                finally:
                    sc.close("success").result(timeout=60)
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(240)
        assert not errors, errors
        assert sorted(results) == list(range(8))
        assert all(np.isfinite(v) and v > 0 for v in results.values())
    finally:
        for s in socks:
            s.close()


def test_serve_command_flags_reach_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    import typer
    from typer.testing import CliRunner

    import skyhub.trainer.tinker.server as server
    from skyhub.trainer.tinker.cli import serve_cmd

    seen: dict[str, Any] = {}
    monkeypatch.setattr(server, "serve", lambda *a, **kw: seen.update(kw))
    app = typer.Typer()
    app.command()(serve_cmd)
    result = CliRunner().invoke(app, [
        "--base-model", "tiny", "--api-key", "tml-a", "--api-key", "tml-b",
        "--max-body-mb", "2", "--max-models-per-session", "4", "--memory-limit-mb", "512"])
    assert result.exit_code == 0, result.output
    assert seen["api_key"] == ["tml-a", "tml-b"]
    assert (seen["max_body_bytes"], seen["max_models_per_session"], seen["memory_limit_mb"]) \
        == (2 << 20, 4, 512)
    monkeypatch.setenv("SKYHUB_TINKER_API_KEY", "tml-x,tml-y")
    assert server._checked_keys(None, "0.0.0.0") == ("tml-x", "tml-y")
    monkeypatch.delenv("SKYHUB_TINKER_API_KEY")
    with pytest.raises(Exception, match="without an API key"):
        server._checked_keys(None, "0.0.0.0")
