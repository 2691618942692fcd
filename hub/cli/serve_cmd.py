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
    expose_reference: Annotated[bool, typer.Option(
        "--expose-reference", help="Answer reference_action (the task's reference solution: "
        "whoever reads it scores as the oracle). Only for clients trusted with the answers; "
        "default: refused.")] = False,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", help="Host names (or addresses) clients may reach the server by, "
        "besides loopback and --host, comma separated (repeatable); '*' for any. Default: "
        "loopback only (a web page could otherwise reach it through DNS rebinding).",
        show_default=False)] = None,
    allow_origin: Annotated[list[str] | None, typer.Option(
        "--allow-origin", help="Web page origins allowed to call the server, e.g. "
        "https://notebook.example:8888 (repeatable). Default: none (programs send no Origin "
        "and are served; a page open in a browser is refused).", show_default=False)] = None,
    header_timeout: Annotated[float, typer.Option(
        help="Seconds a connection has to send its request head; slower ones are closed.")
    ] = 10.0,
    max_connections: Annotated[int | None, typer.Option(
        help="Connections waiting in the HTTP phase at once (at the cap the oldest idle one "
             "is dropped). Default: half of `ulimit -n`, at most 4096.",
        show_default=False)] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve environments over WebSocket, one env per session; clients use
    `skyhub.make(ID, remote="ws://HOST:PORT")`."""
    from skyhub.cli.kwargs import parse_kwargs
    from skyhub.remote.guard import CallerPolicy, describe_hosts, split_names
    from skyhub.remote.server import check_bind, serve

    check_bind(host, token)  # before importing uvicorn and building envs
    allowed = split_names(allow_kwargs)
    hosts, origins = split_names(allow_host), split_names(allow_origin)
    callers = CallerPolicy.make(hosts, origins, bound_to=host)
    typer.echo(f"serving {', '.join(env_ids)} on ws://{host}:{port} "
               f"({'token required' if token else 'no token: loopback only'}; client kwargs: "
               f"{', '.join(allowed) or 'none'}; {describe_hosts(callers)}; browser origins: "
               f"{', '.join(sorted(callers.allow_origins)) or 'none'}; reference_action: "
               f"{'exposed' if expose_reference else 'refused'})", err=True)
    if host in ("0.0.0.0", "::") and not hosts:
        typer.echo("note: clients that reach this server by a name or an address other than "
                   "loopback are refused until you pass --allow-host NAME", err=True)
    serve(env_ids, host, port, token, max_sessions=max_sessions, idle_ttl_s=idle_ttl,
          open_timeout_s=open_timeout, op_timeout_s=op_timeout,
          max_session_s=max_session_time, max_message_bytes=max_message_bytes,
          allow_kwargs=allowed, allow_client_tasks=allow_client_tasks,
          env_kwargs=parse_kwargs(env_kwarg), log_level=log_level,
          expose_reference=expose_reference, allow_hosts=hosts, allow_origins=origins,
          header_timeout_s=header_timeout, max_connections=max_connections)
