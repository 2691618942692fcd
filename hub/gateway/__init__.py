"""`skyhub gateway`: an OpenAI-compatible server that records, per session, the exact tokens
the model produced, so any agent that speaks the OpenAI API can be benchmarked and trained
from what the model actually sampled.

    from skyhub.gateway import Gateway, start
    gw = Gateway(backend)                    # e.g. skyhub.trainer.gateway_backend.EngineBackend
    server = start(gw)                       # a thread of this process; server.http_url
    session = gw.open_session()              # base URL f"{server.http_url}/s/{session.id}/v1",
                                             # API key session.key
    ...                                      # the agent runs
    samples = session.segments()             # the trajectory: one training sample per segment

The parts: `sessions` (records, the re-use of recorded ids, segments), `core` (a request ->
prompt ids -> backend -> record; the `Backend` contract), `wire` (OpenAI's response and stream
format), `app` (the FastAPI routes, keys and tokens). docs/gateway.md is the user's guide.
"""

from skyhub.gateway.core import Backend, Gateway, Generation, Sampling
from skyhub.gateway.sessions import Record, Segment, Session

__all__ = ["Backend", "Gateway", "Generation", "Record", "Sampling", "Segment", "Session",
           "start"]


def start(gateway: Gateway, **kwargs: object) -> object:
    """`skyhub.gateway.app.start` (FastAPI and uvicorn are imported only here)."""
    from skyhub.gateway.app import start as _start

    return _start(gateway, **kwargs)  # type: ignore[arg-type]
