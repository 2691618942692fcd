"""`skyhub mcp ENV_ID [k=v ...]`: serve an env's tools over the Model Context Protocol
(see `skyhub.mcp.server`)."""

from __future__ import annotations

from typing import Annotated

import typer

from skyhub.cli.kwargs import EnvKwargOpt, env_kwargs_of


def mcp_cmd(
    env_id: Annotated[str, typer.Argument(help="The env id, e.g. toy-lookup.")],
    kwargs: Annotated[list[str] | None, typer.Argument(
        help="Env kwargs as key=value (as for `skyhub check`).", show_default=False)] = None,
    env_kwarg: EnvKwargOpt = None,
    transport: Annotated[str, typer.Option(
        help="stdio (one session on this process's stdin/stdout, for clients that start "
             "the server) or http (streamable HTTP on 127.0.0.1, one episode per session).")
    ] = "stdio",
    port: Annotated[int, typer.Option(
        help="Port for --transport http (0: any free port; the URL is printed).")] = 8765,
    log_level: Annotated[str, typer.Option(help="uvicorn log level (http).")] = "warning",
) -> None:
    """Serve an environment over MCP: its tools, plus `reset` and `episode_status`; an env
    without tools is played through one `act` tool. One episode per MCP session."""
    from skyhub.errors import UsageError
    from skyhub.mcp.server import serve_http, serve_stdio

    env_kwargs = env_kwargs_of(kwargs, env_kwarg)
    if transport == "stdio":
        serve_stdio(env_id, env_kwargs)
    elif transport == "http":
        def announce(url: str) -> None:
            typer.echo(f"serving {env_id} over MCP (streamable HTTP) at {url}", err=True)

        serve_http(env_id, env_kwargs, port, log_level=log_level, on_listen=announce)
    else:
        raise UsageError(f"--transport must be stdio or http, not {transport!r}")
