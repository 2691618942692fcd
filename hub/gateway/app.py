"""The gateway's HTTP face (FastAPI): OpenAI's `/v1/chat/completions` and `/v1/models`, per
session, plus the session records.

Routes (each also under `/s/<session>/v1/...` for agents that cannot set a header):

- `POST /v1/chat/completions`: a session named by the `X-Session-ID` header (created on first
  use), or by the path; without either, a new session per request (its id comes back in the
  `X-Session-ID` response header). Tools, `tool_choice` auto/none, `stream`, `logprobs`.
- `GET /v1/models`: the backend's model.
- `POST /sessions`: open a keyed session (`{"id", "key", "base_url"}`); admin token needed
  where the gateway has one.
- `GET /sessions/<id>`: the records and the trajectory's segments.
- `DELETE /sessions/<id>`: forget a session.
- `GET /health`.

Who may do what: the admin token (`Gateway.token`), where set, is needed for everything but
a keyed session's own requests, which need that session's key (as the bearer token, i.e. the
agent's `OPENAI_API_KEY`). A keyed session refuses every other key: agents never see each
other's records.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations (Request, the
# JSON body) at runtime, and Request is imported inside `create_app`.
import hmac
import uuid
from typing import Any

from skyhub.errors import AgentError, UsageError
from skyhub.gateway.core import Gateway
from skyhub.gateway.sessions import Session
from skyhub.gateway.wire import completion_body, error_body, stream_events


def _bearer(headers: Any) -> str:
    auth = headers.get("authorization") or ""
    return auth[7:].strip() if auth.lower().startswith("bearer ") else ""


def _same(a: str, b: str | None) -> bool:
    return b is not None and hmac.compare_digest(a.encode(), b.encode())


def create_app(gateway: Gateway) -> Any:
    """The FastAPI app serving `gateway`."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, StreamingResponse

    app = FastAPI(title="skyhub gateway", docs_url=None, redoc_url=None)

    def refuse(status: int, message: str, kind: str = "invalid_request_error") -> Any:
        return JSONResponse(error_body(message, kind), status_code=status)

    def admin(request: Request) -> bool:
        return gateway.token is None or _same(_bearer(request.headers), gateway.token)

    def allowed(request: Request, session: Session | None) -> bool:
        if gateway.token is not None and _same(_bearer(request.headers), gateway.token):
            return True
        if session is not None and session.key is not None:
            return _same(_bearer(request.headers), session.key)
        return gateway.token is None

    def session_for(request: Request, sid: str | None) -> tuple[Session | None, Any]:
        sid = sid or request.headers.get("x-session-id")
        if sid is not None and not (0 < len(sid) <= 128 and sid.isprintable()):
            return None, refuse(400, "a session id is 1 to 128 printable characters")
        session = gateway.sessions.get(sid) if sid else None
        if not allowed(request, session):
            return None, refuse(401, "missing or wrong key for this session: send "
                                     "'Authorization: Bearer KEY' (the session's key or the "
                                     "gateway's token)", "authentication_error")
        if session is None:
            session = gateway.sessions.get(sid or uuid.uuid4().hex, create=True)
        return session, None

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "model": gateway.backend.model}

    def models(request: Request, sid: str | None = None) -> Any:
        if sid is not None:
            _, refused = session_for(request, sid)
            if refused is not None:
                return refused
        elif not admin(request):
            return refuse(401, "missing or wrong token", "authentication_error")
        return {"object": "list", "data": [{"id": gateway.backend.model, "object": "model",
                                            "created": 0, "owned_by": "skyhub"}]}

    def chat(request: Request, body: dict[str, Any], sid: str | None = None) -> Any:
        session, refused = session_for(request, sid)
        if refused is not None:
            return refused
        assert session is not None
        try:
            record = gateway.complete(session, body)
        except UsageError as e:
            return refuse(400, str(e))
        except AgentError as e:  # the upstream (eval mode) failed
            return refuse(502, str(e), "upstream_error")
        model = str(body.get("model") or gateway.backend.model)
        headers = {"X-Session-ID": session.id}
        logprobs = bool(body.get("logprobs"))
        if body.get("stream"):
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(stream_events(record, model, logprobs=logprobs,
                                                   include_usage=include),
                                     media_type="text/event-stream", headers=headers)
        return JSONResponse(completion_body(record, model, logprobs=logprobs),
                            headers=headers)

    @app.get("/v1/models")
    def list_models(request: Request) -> Any:
        return models(request)

    @app.get("/s/{sid}/v1/models")
    def list_models_in(sid: str, request: Request) -> Any:
        return models(request, sid)

    @app.post("/v1/chat/completions")
    def chat_completions(body: dict[str, Any], request: Request) -> Any:
        return chat(request, body)

    @app.post("/s/{sid}/v1/chat/completions")
    def chat_completions_in(sid: str, body: dict[str, Any], request: Request) -> Any:
        return chat(request, body, sid)

    @app.post("/sessions")
    def open_session(request: Request) -> Any:
        if not admin(request):
            return refuse(401, "opening a session needs the gateway's token",
                          "authentication_error")
        session = gateway.open_session()
        base = str(request.base_url).rstrip("/")
        return {"id": session.id, "key": session.key, "base_url": f"{base}/s/{session.id}/v1"}

    def existing(request: Request, sid: str) -> tuple[Session | None, Any]:
        """The session `sid` where the request may use it, else the refusal to send."""
        session = gateway.sessions.get(sid)
        if session is None:
            return None, refuse(404, f"no session {sid!r} on this gateway", "not_found_error")
        if not allowed(request, session):
            return None, refuse(401, "missing or wrong key for this session",
                                "authentication_error")
        return session, None

    @app.get("/sessions/{sid}")
    def read_session(sid: str, request: Request) -> Any:
        session, refused = existing(request, sid)
        return refused if session is None else session.to_json()

    @app.delete("/sessions/{sid}")
    def forget_session(sid: str, request: Request) -> Any:
        session, refused = existing(request, sid)
        if session is None:
            return refused
        gateway.sessions.close(sid)
        return {"id": sid, "deleted": True}

    return app


def start(gateway: Gateway, *, host: str = "127.0.0.1", port: int = 0,
          log_level: str = "warning") -> Any:
    """The gateway served from a thread of this process (`UvicornThread`, started: its
    `http_url`; `stop()` ends it). What harnesses and tests use."""
    import uvicorn

    from skyhub.remote.http_server import UvicornThread, uvicorn_config

    server = uvicorn.Server(uvicorn_config(create_app(gateway), host, port,
                                           log_level=log_level))
    return UvicornThread(server, host, port, name="skyhub-gateway").start()


__all__ = ["create_app", "start"]
