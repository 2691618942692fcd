"""`skyhub serve ENV_ID...`: serve registered envs over WebSocket (see `skyhub.remote`)."""

from __future__ import annotations

from typing import Annotated

import typer


def serve_cmd(
    env_ids: Annotated[list[str], typer.Argument(
        help="Env ids to serve, e.g. toy-lookup sql-synth.", show_default=False)],
    host: Annotated[str, typer.Option(
        help="Address to bind. Anything but loopback needs a token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8000,
    token: Annotated[str | None, typer.Option(
        envvar="SKYHUB_TOKEN", help="Clients must send this token (Authorization: Bearer).",
        show_default=False)] = None,
    max_sessions: Annotated[int, typer.Option(
        help="Sessions (one env each) open at once; more are refused with close code 4429.")
    ] = 64,
    idle_ttl: Annotated[float, typer.Option(
        help="Seconds without a message after which an open session and its env are "
             "closed.")] = 600,
    open_timeout: Annotated[float, typer.Option(
        help="Seconds a new connection has to open its env; until then it holds a slot, so "
             "connections that never open are closed after this.")] = 10,
    op_timeout: Annotated[float, typer.Option(
        help="Seconds one env call (open, reset, step) may take; past it the session is "
             "closed (code 4504) and its slot stays taken until the call returns.")] = 300,
    max_session_time: Annotated[float | None, typer.Option(
        help="Seconds a session may last in all (default: no limit).",
        show_default=False)] = None,
    max_message_bytes: Annotated[int, typer.Option(
        help="Largest request accepted; larger ones get an error reply.")] = 1_000_000,
    env_kwarg: Annotated[list[str] | None, typer.Option(
        "--env-kwarg", "-k", help="Env kwarg key=value for every served env (repeatable).",
        show_default=False)] = None,
    allow_kwargs: Annotated[list[str] | None, typer.Option(
        "--allow-kwargs", help="Env kwargs clients may set in their `open`, by name, comma "
        "separated (repeatable), e.g. --allow-kwargs max_turns,split. Default: none (a "
        "client's kwarg could name a server file or cost its memory).",
        show_default=False)] = None,
    allow_client_tasks: Annotated[bool, typer.Option(
        "--allow-client-tasks", help="Run tasks clients define in reset(options={'task': "
        "...}); default: clients pick a served task by task_id only.")] = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve environments over WebSocket, one env per session; clients use
    `skyhub.make(ID, remote="ws://HOST:PORT")`."""
    from skyhub.cli.kwargs import parse_kwargs
    from skyhub.remote.server import check_bind, serve

    check_bind(host, token)  # before importing uvicorn and building envs
    allowed = [k.strip() for item in allow_kwargs or () for k in item.split(",") if k.strip()]
    typer.echo(f"serving {', '.join(env_ids)} on ws://{host}:{port} "
               f"({'token required' if token else 'no token: loopback only'}; client kwargs: "
               f"{', '.join(allowed) or 'none'})", err=True)
    serve(env_ids, host, port, token, max_sessions=max_sessions, idle_ttl_s=idle_ttl,
          open_timeout_s=open_timeout, op_timeout_s=op_timeout,
          max_session_s=max_session_time, max_message_bytes=max_message_bytes,
          allow_kwargs=allowed, allow_client_tasks=allow_client_tasks,
          env_kwargs=parse_kwargs(env_kwarg), log_level=log_level)
