"""The env server's token: where it is read (the `Authorization` header only), and the ASGI
gate in front of every route that scrubs credentials from URLs and refuses HTTP requests
without it (`TokenGate`). WebSockets are checked by the session handler (server.py), which
can close them with a reason.
"""

from __future__ import annotations

import hmac
import json
import re
from typing import Any

#: Query parameters that look like credentials: refused, and scrubbed before anything logs
#: the request line (uvicorn's access log writes the path with its query string).
SECRET_PARAM = re.compile(rb"(^|&)((?:access_)?token|api_key|key)=[^&]*", re.IGNORECASE)


def authorized(token: str | None, headers: Any) -> bool:
    """Whether a request with `headers` carries `token` (None: no token needed), in its
    `Authorization` header (the only place a token is read from: URLs end up in logs and
    browser histories)."""
    if token is None:
        return True
    auth = headers.get("authorization") or ""
    given = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    return hmac.compare_digest(given.encode(), token.encode())


class TokenGate:
    """ASGI middleware in front of every route: strips credentials from URLs before anything
    can log them (the request line in uvicorn's access log), and answers 401 to an HTTP
    request without the token (every route but `/health`: `/docs` and `/openapi.json` too).
    WebSockets are checked by the session handler, which closes with 4401 and a reason."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app, self.token = app, token or None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        query = scope.get("query_string") or b""
        in_url = bool(SECRET_PARAM.search(query))
        if in_url:  # in place: uvicorn logs from this very dict
            scope["query_string"] = SECRET_PARAM.sub(rb"\1\2=REDACTED", query)
        if scope["type"] == "http" and self.token is not None \
                and scope.get("path") != "/health":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope.get("headers") or ()}
            if in_url or not authorized(self.token, headers):
                why = ("send the token in the Authorization header, never in the URL"
                       if in_url else "missing or wrong token")
                await json_response(send, 401, {
                    "detail": f"{why}: send 'Authorization: Bearer TOKEN'"})
                return
        await self.app(scope, receive, send)


async def json_response(send: Any, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
