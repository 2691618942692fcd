"""The Tinker server's HTTP side: `create_app(service)`, the FastAPI app that speaks the
official `tinker` SDK's protocol and calls `TinkerService` (`service.py`) with each request's
principal. The routes follow the SDK's resources (`tinker/resources/*.py`):

- session and config: `create_session`, `session_heartbeat`, `client/config`, `healthz`,
  `get_server_capabilities`, `telemetry` (accepted and dropped);
- work, answered with a request id and run by the worker (`jobs.py`): `create_model`,
  `forward_backward` (protobuf body), `optim_step`, `save_weights`, `load_weights`,
  `save_weights_for_sampler`, `asample`;
- results: `retrieve_future` long-polls (~20 s) and then answers HTTP 408, which the SDK
  treats as "ask again"; loss outputs and samples come back as protobuf, the rest as JSON;
  a failed request is `{"error", "category"}`, which the SDK raises as `RequestFailedError`.

Every route needs an accepted API key (401 otherwise), and a request body over
`max_body_bytes` (`--max-body-mb`) is answered 413 before it is read (by its Content-Length;
a chunked body is counted as it arrives, `_BodyLimit`); a zstd body or a sparse tensor may
not expand past the same limit (`wire.py`).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request  # module level: FastAPI resolves route annotations here

from skyhub.errors import SkyhubError
from skyhub.trainer.tinker.exceptions import Unsupported
from skyhub.trainer.tinker.service import TinkerService

POLL_S = 20.0  # a retrieve_future waits this long before answering "ask again" (SDK: 45 s)


def _route(request_type: Any, handle: Any, service: TinkerService) -> Any:
    """A route that parses the body as `request_type` and returns `handle(request, who)`."""
    async def route(request: Request) -> Any:
        req = request_type.model_validate(await request.json())
        return handle(req, service.principal(request.headers))

    return route


class _Refused(SkyhubError):
    def __init__(self, status: int, message: str) -> None:
        self.status, self.message = status, message


class _TooLarge(SkyhubError):
    pass


class _BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is answered 413 before it is read
    into memory: at once when its Content-Length says so, else (a chunked body) as soon as
    the bytes received pass the limit."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = next((v for k, v in scope.get("headers") or () if k.lower() == b"content-length"),
                      None)
        if length is not None:
            if not length.strip().isdigit() or int(length) > self.limit:
                await self._refuse(send)
                return
            await self.app(scope, receive, send)  # the server reads no more than it says
            return
        received, started = 0, False

        async def counted() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _TooLarge
            return message

        async def watched(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Any) -> None:
        message = (f"request body over this server's limit of {self.limit} bytes "
                   "(`skyhub tinker serve --max-body-mb`); send smaller batches")
        data = json.dumps({"error": message, "detail": message}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(data)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": data})


# ---------------------------------------------------------------------- HTTP
def create_app(service: TinkerService) -> Any:
    """The FastAPI app: each route parses the SDK's request type and calls the service with
    the request's principal."""
    from fastapi import Depends, FastAPI
    from fastapi.responses import JSONResponse, Response
    from pydantic import ValidationError
    from tinker import types

    from skyhub.trainer.tinker.wire import decode_forward_backward

    # no /docs, /redoc or /openapi.json: they would answer without the API key
    app = FastAPI(title="skyhub tinker", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.add_middleware(_BodyLimit, limit=service.max_body_bytes)
    v1 = "/api/v1"

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message, "detail": message}, status_code=status)

    async def check_key(request: Request) -> None:
        if not service.key_accepted(request.headers.get("x-api-key")):
            raise _Refused(401, "wrong or missing API key: pass the server's key as "
                                "api_key= or TINKER_API_KEY")

    app.router.dependencies.append(Depends(check_key))

    def who(request: Request) -> str:
        return service.principal(request.headers)

    @app.exception_handler(_Refused)
    async def refused(request: Request, e: _Refused) -> JSONResponse:
        return error(e.status, e.message)

    @app.exception_handler(ValidationError)
    async def malformed(request: Request, e: ValidationError) -> JSONResponse:
        return error(400, f"malformed request for {request.url.path}: {str(e)[:2000]}")

    @app.exception_handler(Unsupported)
    async def unsupported(request: Request, e: Unsupported) -> JSONResponse:
        return error(400, str(e))

    @app.get(v1 + "/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.post(v1 + "/client/config")
    async def client_config() -> dict:
        # plain API keys, one chunk per forward_backward call in order, httpx transport,
        # per-request polling: the simplest protocol every SDK feature works over
        return types.ClientConfigResponse(
            pjwt_auth_enabled=False, parallel_fwdbwd_chunks=False, proto_compress_fwdbwd=False,
            use_pyqwest_transport=False, sample_use_retrieve_futures=False,
            custom_loss_server_side=False, sample_join_sampling_session=False,
        ).model_dump()

    @app.post(v1 + "/client/dynamic_config")
    async def dynamic_config() -> dict:
        return types.ClientDynamicConfigResponse().model_dump()

    @app.get(v1 + "/get_server_capabilities")
    async def capabilities() -> dict:
        return {"supported_models": [{"model_name": service.host.name, "trainable": True,
                                      "sampleable": True,
                                      "max_context_length": service.host.max_length}]}

    @app.post(v1 + "/create_session")
    async def create_session(request: Request) -> dict:
        types.CreateSessionRequest.model_validate(await request.json())
        return {"type": "create_session", "session_id": service.new_session(who(request))}

    @app.post(v1 + "/session_heartbeat")
    async def heartbeat(request: Request) -> Any:
        req = types.SessionHeartbeatRequest.model_validate(await request.json())
        if not service.heartbeat(req.session_id, who(request)):
            # 410: the SDK stops heartbeating a session that is gone (or was never its own)
            return error(410, f"session {req.session_id[:100]!r} has ended")
        return {"type": "session_heartbeat"}

    @app.post(v1 + "/sessions/{session_id}/finish")
    async def finish(session_id: str, request: Request) -> Response:
        service.finish_session(session_id, who(request))  # another's: nothing happens
        return Response(status_code=204)

    @app.post(v1 + "/telemetry")
    async def telemetry() -> dict:
        return {"status": "accepted"}

    # routes whose body is one of the SDK's request types: parse it, hand it to the service
    # (work is answered with its request id, for the SDK to poll)
    work = {"create_model": (types.CreateModelRequest, service.create_model),
            "optim_step": (types.OptimStepRequest, service.optim_step),
            "save_weights": (types.SaveWeightsRequest, service.save_weights),
            "load_weights": (types.LoadWeightsRequest, service.load_weights),
            "save_weights_for_sampler": (types.SaveWeightsForSamplerRequest,
                                         service.save_for_sampler),
            "create_sampling_session": (types.CreateSamplingSessionRequest,
                                        service.create_sampler),
            "get_info": (types.GetInfoRequest, service.info),
            "asample": (types.SampleRequest, service.sample)}
    for name, (request_type, handle) in work.items():
        app.post(f"{v1}/{name}")(_route(request_type, handle, service))

    @app.post(v1 + "/forward_backward")
    async def forward_backward(request: Request) -> Any:
        try:
            call = decode_forward_backward(await request.body(),
                                           request.headers.get("content-encoding"),
                                           service.max_body_bytes)
        except _TooLarge:
            raise  # for _BodyLimit to answer
        except Exception as e:
            return error(413 if type(e).__name__ == "BodyTooLarge" else 400,
                         f"forward_backward: the body is not a ForwardBackwardRequest "
                         f"protobuf this server accepts ({str(e)[:500]})")
        return service.forward_backward(call, who(request))

    @app.post(v1 + "/join_sampling_session")
    async def join_sampling_session(request: Request) -> dict:
        req = types.JoinSamplingSessionRequest.model_validate(await request.json())
        service.sampler(req.sampling_session_id, who(request))
        return {"type": "join_sampling_session", "client_counter": next(service._joins)}

    @app.get(v1 + "/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str, request: Request) -> dict:
        _, path = service.sampler(sampler_id, who(request))
        return {"sampler_id": sampler_id, "base_model": service.host.name, "model_path": path}

    @app.get(v1 + "/training_runs/{model_id}/checkpoints")
    async def checkpoints(model_id: str, request: Request) -> dict:
        return service.list_checkpoints(model_id, who(request))

    @app.post(v1 + "/cancel_future")
    async def cancel_future() -> Response:
        return Response(status_code=204)

    @app.post(v1 + "/retrieve_future")
    async def retrieve_future(request: Request) -> Any:
        req = types.FutureRetrieveRequest.model_validate(await request.json())
        if not service.jobs.known(req.request_id, who(request)):
            return error(404, f"unknown request id {req.request_id[:100]!r} (the server "
                              "restarted or forgot it); send the request again")
        outcome = await service.jobs.wait(req.request_id, POLL_S)
        if outcome is None:  # still queued or running: the SDK asks again at once
            return JSONResponse({"type": "try_again", "request_id": req.request_id,
                                 "queue_state": "active"}, status_code=408)
        if outcome.error is not None:
            return {"error": outcome.error, "category": outcome.category}
        if outcome.proto is not None:
            return Response(outcome.proto, media_type="application/x-protobuf")
        return outcome.json

    @app.api_route(v1 + "/{rest:path}", methods=["GET", "POST", "PUT", "DELETE"])
    async def not_here(rest: str) -> JSONResponse:
        return error(404, f"/api/v1/{rest[:200]} is not supported by skyhub's Tinker server "
                          "(it serves training, sampling and checkpoints; see "
                          "`skyhub tinker serve --help`)")

    return app
