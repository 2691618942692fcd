"""The `skyhub` command: list, inspect, check, play and evaluate environments; train.

Only typer (with click) and rich are imported at module level so that `skyhub --help` stays
fast: the registry (and with it gymnasium and the env families) is imported inside the
commands that need it. The families' and the trainer's commands (`sql`, `search`, `harbor`,
`train`, `tinker`) come in through the entry-point group `skyhub.cli`, loaded only when one
is run or listed, so core imports no family and no trainer. A `SkyhubError` (unknown id,
missing data or dependency) is printed in red without a traceback and exits with code 2,
like a usage error.
"""

from __future__ import annotations

import functools
import json
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

if TYPE_CHECKING:  # typer vendors click (typer._click); annotations only
    import click

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from skyhub.cli.kwargs import EnvKwargOpt, env_kwargs_of
from skyhub.cli.play import INPUT_HELP
from skyhub.cli.typed_help import install_typed_help
from skyhub.errors import SkyhubError

# -------------------------------------------------------- commands of families and the trainer
# The entry-point group `skyhub.cli` names the commands that live outside core: the families'
# (`skyhub sql`, `skyhub search`, `skyhub harbor`) and the trainer's (`skyhub train`,
# `skyhub tinker`), so core imports neither. An entry point is a typer app (a command group)
# or a plain command function. They load lazily, when the command is run or the help lists
# them, so that importing this module (and `skyhub list`, `skyhub eval ...`) loads none.
_plugin_commands: dict[str, click.Command | None] = {}  # loaded once per process


def _plugin_entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in sorted(entry_points(group="skyhub.cli"), key=lambda e: e.name)}


def _load_plugin(ep: Any) -> click.Command | None:
    """The click command of one `skyhub.cli` entry point; a plugin that fails to load is
    reported and skipped (None), never a broken CLI."""
    if ep.name in _plugin_commands:
        return _plugin_commands[ep.name]
    try:
        obj = ep.load()
        host = typer.Typer(add_completion=False)  # built as core's own commands are
        if isinstance(obj, typer.Typer):
            _wrap_commands(obj)
            host.add_typer(obj, name=ep.name)
            command: click.Command | None = typer.main.get_group(host).commands[ep.name]
        elif callable(obj):
            host.command(ep.name)(_friendly_errors(obj))
            command = typer.main.get_command(host)
        else:
            raise TypeError(f"{ep.value} is neither a typer app nor a function")
    except Exception as e:  # a broken plugin must not take the whole CLI down
        _console(stderr=True).print(Text(f"warning: the {ep.name!r} commands could not be "
                                         f"loaded ({type(e).__name__}: {e})", style="yellow"))
        command = None
    _plugin_commands[ep.name] = command
    return command


def _wrap_commands(group: typer.Typer) -> None:
    """Give every command of a plugin's group, and of its sub-groups (`skyhub sql data get`),
    the CLI's handling of a `SkyhubError`."""
    for one in group.registered_commands:
        one.callback = _friendly_errors(one.callback)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _wrap_commands(sub.typer_instance)


class _Commands(TyperGroup):
    """Core's commands, then those of the `skyhub.cli` entry points (by name; core's win a
    clash), each loaded when it is run or listed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = super().list_commands(ctx)
        return names + [name for name, ep in _plugin_entry_points().items()
                        if name not in self.commands and _load_plugin(ep) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        ep = _plugin_entry_points().get(cmd_name)
        return None if ep is None else _load_plugin(ep)


install_typed_help()

app = typer.Typer(
    name="skyhub",
    help="skyhub: a hub of text RL environments for LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_Commands,
)

F = TypeVar("F", bound=Callable[..., Any])
KwargsArg = Annotated[list[str] | None, typer.Argument(
    help="Env kwargs as key=value (3 is an int, 0.5 a float, true/false a bool, none None, "
         "[..] and {..} JSON; anything else text).", show_default=False)]


def _console(stderr: bool = False) -> Console:
    # Made per command so that a redirected sys.stdout (tests, pipes) is honoured.
    return Console(stderr=stderr, highlight=False)


def _friendly_errors(fn: F) -> F:
    """Turn a `SkyhubError` into its message in red and exit code 2 (no traceback)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SkyhubError as e:
            _console(stderr=True).print(Text(f"error: {e}", style="red"), soft_wrap=True)
            raise typer.Exit(2) from None
    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        from skyhub import __version__

        typer.echo(f"skyhub {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Show the version and exit.")] = False,
) -> None:
    """skyhub: a hub of text RL environments for LLM agents."""


def _entry_point(spec: Any) -> str:
    ep = spec.entry_point
    return ep if isinstance(ep, str) else getattr(ep, "__qualname__", repr(ep))


@app.command("list")
@_friendly_errors
def list_cmd(
    tag: Annotated[str | None, typer.Option(help="Only envs with this tag.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the registered environments (plugins included)."""
    from skyhub.registry import list_envs, plugin_errors

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # failed plugins are listed below instead
        specs, errors = list_envs(), plugin_errors()
    if tag is not None:
        specs = [s for s in specs if tag in s.tags]
    out, err = _console(), _console(stderr=True)
    if as_json:
        typer.echo(json.dumps([{"id": s.id, "description": s.description, "tags": list(s.tags),
                                "source": s.source, "entry_point": _entry_point(s)}
                               for s in specs], indent=2))
    elif specs:
        table = Table(title="skyhub environments", title_justify="left")
        table.add_column("id", style="cyan", no_wrap=True)
        table.add_column("description")
        table.add_column("tags")
        table.add_column("source")
        for s in specs:
            table.add_row(s.id, Text(s.description), ", ".join(s.tags), s.source)
        out.print(table)
    else:
        out.print(Text(f"no env has tag {tag!r}" if tag else "no env is registered",
                       style="yellow"))
    for name, error in errors.items():
        (err if as_json else out).print(Text(f"plugin {name} failed to load: {error}",
                                             style="yellow"))


def _kwargs_table(spec: Any) -> Table:
    """The kwargs the env accepts: name, default (the registered one where given), type and
    what its docstring says, whole (the table wraps it; nothing is cut). A name the env
    declares an alias of another kwarg (`kwarg_aliases`) is named in that kwarg's row."""
    import inspect
    import typing

    from skyhub.env_kwargs import accepted_kwargs

    accepted, complete = accepted_kwargs(spec)
    table = Table(title="kwargs (name=value after the id, or -k name=value)" + (
        "" if complete else "; it also takes others this list cannot show"),
        title_justify="left")
    for col in ("kwarg", "default", "type", "description"):
        table.add_column(col, overflow="fold")
    aliases: dict[str, list[str]] = {}
    for name in sorted(accepted):
        if accepted[name].alias_of:
            aliases.setdefault(accepted[name].alias_of, []).append(name)
    for name in sorted(accepted):
        k = accepted[name]
        if k.alias_of:
            continue
        default = spec.kwargs.get(name, k.default)
        shown = "(required)" if default is inspect.Parameter.empty else repr(default)
        kind = "" if k.annotation is None else (
            getattr(k.annotation, "__name__", None) if typing.get_origin(k.annotation) is None
            else None) or str(k.annotation).replace("typing.", "").replace("pathlib.", "")
        by_doc: dict[str, list[str]] = {}  # `a / b: text` documents both: named together
        for alias in aliases.get(name, ()):
            by_doc.setdefault(accepted[alias].doc, []).append(f"{alias}=")
        doc = " ".join([k.doc, *(f"{' / '.join(names)}: {text}"
                                 for text, names in by_doc.items())])
        table.add_row(name, Text(shown), Text(kind), Text(doc.strip()))
    return table


@app.command()
@_friendly_errors
def info(env_id: Annotated[str, typer.Argument(help="The env id, e.g. toy-arith.")],
         kwargs: KwargsArg = None, env_kwarg: EnvKwargOpt = None) -> None:
    """Show an environment's spec, system prompt, task count and a sample task."""
    from skyhub.registry import spec as get_spec

    env_kwargs = env_kwargs_of(kwargs, env_kwarg)
    spec = get_spec(env_id)
    out = _console()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("id", spec.id)
    grid.add_row("description", Text(spec.description))
    grid.add_row("entry point", _entry_point(spec))
    grid.add_row("default kwargs", Text(json.dumps(spec.kwargs, default=str)))
    grid.add_row("tags", ", ".join(spec.tags))
    grid.add_row("source", spec.source)
    out.print(grid)
    out.print(_kwargs_table(spec))
    env = spec.make(**env_kwargs)
    try:
        out.print(Panel(Text(env.system_prompt or "(none)"), title="system prompt"))
        tasks = env.tasks
        out.print(f"tasks: {len(tasks)}")
        if len(tasks):
            out.print(Panel(Text(tasks[0].prompt), title=f"sample task {tasks[0].id}"))
    finally:
        env.close()


@app.command()
@_friendly_errors
def check(
    env_id: Annotated[str, typer.Argument(
        help="The env id (e.g. toy-arith), or the folder of an env package.")],
    kwargs: KwargsArg = None,
    env_kwarg: EnvKwargOpt = None,
    episodes: Annotated[int, typer.Option(help="Episodes for the reference and info checks.")] = 3,
    seed: Annotated[int, typer.Option(help="First seed the checks use.")] = 0,
) -> None:
    """Check that an environment keeps the skyhub env contract; exit code 1 if not."""
    from skyhub.cli.publish_cmds import resolve_check_target
    from skyhub.eval.checks import check_env

    ok = True
    for one in resolve_check_target(env_id):
        report = check_env(one, env_kwargs=env_kwargs_of(kwargs, env_kwarg), episodes=episodes,
                           seed=seed)
        _console().print(report.to_table())
        ok = ok and report.ok
    raise typer.Exit(0 if ok else 1)


@app.command(help=f"Play an environment yourself, reading actions from stdin.\n\n{INPUT_HELP}")
@_friendly_errors
def play(
    env_id: Annotated[str, typer.Argument(help="The env id, e.g. toy-arith.")],
    kwargs: KwargsArg = None,
    env_kwarg: EnvKwargOpt = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the first episode.")] = None,
    task_id: Annotated[str | None, typer.Option(help="Play this task (every episode).")] = None,
) -> None:
    from skyhub import make
    from skyhub.cli.play import play as play_episodes

    env = make(env_id, **env_kwargs_of(kwargs, env_kwarg))
    try:
        if task_id is not None and not any(t.id == task_id for t in env.tasks):
            raise typer.BadParameter(f"{env_id} has no task {task_id!r}", param_hint="--task-id")
        play_episodes(env, stdin=sys.stdin, console=_console(), seed=seed, task_id=task_id)
    finally:
        env.close()


def _add_subcommands() -> None:
    from skyhub.cli.bench_cmd import bench_cmd
    from skyhub.cli.eval_cmds import eval_app
    from skyhub.cli.export_cmd import export_cmd  # noqa: F401  (adds `eval export`)
    from skyhub.cli.mcp_cmd import mcp_cmd
    from skyhub.cli.publish_cmds import install_cmd, new_cmd, publish_cmd
    from skyhub.cli.replay_cmd import replay_cmd
    from skyhub.cli.sandbox_cmds import images_app, sandbox_app
    from skyhub.cli.serve_cmd import serve_cmd
    from skyhub.cli.view_cmd import view_cmd

    for name, sub in (("eval", eval_app), ("sandbox", sandbox_app), ("images", images_app)):
        for command in sub.registered_commands:
            command.callback = _friendly_errors(command.callback)
        app.add_typer(sub, name=name)
    app.command("bench")(_friendly_errors(bench_cmd))
    app.command("new")(_friendly_errors(new_cmd))
    app.command("publish")(_friendly_errors(publish_cmd))
    app.command("install")(_friendly_errors(install_cmd))
    app.command("serve")(_friendly_errors(serve_cmd))
    app.command("mcp")(_friendly_errors(mcp_cmd))
    app.command("view")(_friendly_errors(view_cmd))
    app.command("replay")(_friendly_errors(replay_cmd))


_add_subcommands()


def main() -> None:
    """The console entry point (`skyhub` on the PATH). A `SkyhubError` from any command,
    subcommands included, is a red message and exit code 2, never a traceback."""
    try:
        app()
    except SkyhubError as e:
        _console(stderr=True).print(Text(f"error: {e}", style="red"), soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
