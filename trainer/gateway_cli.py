"""`skyhub gateway`: serve a model through the OpenAI-compatible gateway that records exact
tokens per session (`skyhub.gateway`; engines from `skyhub.trainer.inference`).

Core's CLI finds the command through the entry point `gateway` of the group `skyhub.cli`; the
trainer and the model load only when the command runs.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any

import typer

from skyhub.errors import UsageError

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def gateway_cmd(
    model: Annotated[str, typer.Option(
        help="A model folder (save_pretrained's), a `skyhub train` run folder (its newest "
             "checkpoint), or a hub id this machine can load; with --upstream, the "
             "upstream's model id.")],
    upstream: Annotated[str | None, typer.Option(
        show_default=False,
        help="Eval mode: forward requests to this OpenAI-compatible base URL (e.g. "
             "http://host:8000/v1) and record each session's messages and replies (text: "
             "no token ids, so not for training).")] = None,
    upstream_key: Annotated[str | None, typer.Option(
        envvar="OPENAI_API_KEY", show_default=False,
        help="The upstream's API key (default: $OPENAI_API_KEY).")] = None,
    engine: Annotated[str, typer.Option(help="Inference engine: hf or vllm.")] = "hf",
    host: Annotated[str, typer.Option(
        help="Address to listen on. Anything but loopback needs --token (one is made and "
             "printed when none is given).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free one; the URL is printed).")
                    ] = 8300,
    token: Annotated[str | None, typer.Option(
        envvar="SKYHUB_GATEWAY_TOKEN",
        help="Admin token: required as 'Authorization: Bearer TOKEN' for every request but a "
             "keyed session's own. Default: none on loopback.")] = None,
    tool_parser: Annotated[str, typer.Option(
        help="Tool-call parser: auto (from the chat template), hermes, qwen3_coder, "
             "llama3_json, or none (replies are text).")] = "auto",
    max_tokens: Annotated[int, typer.Option(help="A request's max_tokens when it sets none.")
                          ] = 512,
    served_name: Annotated[str | None, typer.Option(
        help="The model id /v1/models lists (default: --model).")] = None,
    seed: Annotated[int, typer.Option(help="The engine's seed.")] = 0,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """Serve a model over an OpenAI-compatible API (/v1/chat/completions with tools and
    streaming, /v1/models), recording each session's prompt and sampled token ids, logprobs
    and policy versions (GET /sessions/ID). Sessions: the X-Session-ID header, or the base
    URL /s/ID/v1 for agents that cannot set headers."""
    import uvicorn

    from skyhub.gateway import Gateway
    from skyhub.gateway.app import create_app
    from skyhub.remote.guard import listen_socket
    from skyhub.remote.http_server import uvicorn_config

    if host not in _LOOPBACK and not token:
        token = secrets.token_urlsafe(24)
        typer.echo(f"listening on {host}: admin token {token}", err=True)
    if upstream is not None:
        from skyhub.gateway.upstream import UpstreamBackend

        backend = UpstreamBackend(upstream, model=served_name or model, api_key=upstream_key)
        what = f"upstream {upstream}"
    else:
        backend, what = _engine_backend(model, engine, tool_parser, max_tokens, served_name,
                                        seed)
    app = create_app(Gateway(backend, token=token))
    sock = listen_socket(host, port, backlog=128)  # bound first: port 0 prints the real one
    port = sock.getsockname()[1]
    typer.echo(f"skyhub gateway: {backend.model} ({what}) at http://{host}:{port}/v1",
               err=True)
    uvicorn.Server(uvicorn_config(app, host, port, log_level=log_level)).run(sockets=[sock])


def _engine_backend(model: str, engine: str, tool_parser: str, max_tokens: int,
                    served_name: str | None, seed: int) -> tuple[Any, str]:
    """The model loaded into a skyhub engine, as the gateway's backend."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skyhub.trainer.gateway_backend import EngineBackend
    from skyhub.trainer.hf_agent import resolve_model_dir
    from skyhub.trainer.inference import make_engine

    model_dir, tok_dir = resolve_model_dir(model)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    if engine == "hf":
        policy = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        eng = make_engine("hf", policy, tokenizer, seed=seed)
    elif engine == "vllm":
        eng = make_engine("vllm", model_dir, tokenizer, seed=seed)
    else:
        raise UsageError(f"--engine must be hf or vllm, not {engine!r}")
    backend = EngineBackend(eng, tokenizer, model=served_name or model,
                            tool_parser=None if tool_parser == "none" else tool_parser,
                            max_tokens=max_tokens)
    return backend, f"{engine}, tool parser {backend.parser_name}"
