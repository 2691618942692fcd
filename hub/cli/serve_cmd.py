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
        help="Seconds without a message after which a session and its env are closed.")] = 600,
    max_message_bytes: Annotated[int, typer.Option(
        help="Largest request accepted; larger ones get an error reply.")] = 1_000_000,
    env_kwarg: Annotated[list[str] | None, typer.Option(
        "--env-kwarg", "-k", help="Default env kwarg key=value for every served env "
        "(repeatable); clients' kwargs override it.", show_default=False)] = None,
    no_client_kwargs: Annotated[bool, typer.Option(
        "--no-client-kwargs", help="Refuse env kwargs sent by clients.")] = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve environments over WebSocket, one env per session; clients use
    `skyhub.make(ID, remote="ws://HOST:PORT")`."""
    from skyhub.cli.kwargs import parse_kwargs
    from skyhub.remote.server import check_bind, serve

    check_bind(host, token)  # before importing uvicorn and building envs
    typer.echo(f"serving {', '.join(env_ids)} on ws://{host}:{port} "
               f"({'token required' if token else 'no token: loopback only'})", err=True)
    serve(env_ids, host, port, token, max_sessions=max_sessions, idle_ttl_s=idle_ttl,
          max_message_bytes=max_message_bytes, allow_kwargs=not no_client_kwargs,
          env_kwargs=parse_kwargs(env_kwarg), log_level=log_level)
