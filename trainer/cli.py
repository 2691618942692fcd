"""`skyhub train`: train a policy on a skyhub env from a recipe (extra `train`).

The trainer is imported inside the command, so `skyhub --help` stays fast and works without
torch installed. Core's CLI finds it through the entry point `train` of the group
`skyhub.cli` (pyproject.toml), so core imports no trainer.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from skyhub.cli.kwargs import EnvKwargOpt
from skyhub.errors import MissingDependency, UsageError


def _env_id(arg: str, console: Console) -> str:
    """`--env ARG`: an env id, or the folder of an env package, resolved as `skyhub check` and
    `skyhub eval` resolve theirs (its entry-point modules imported from that folder, not
    installed); an unknown id fails here, before a model loads."""
    from skyhub.cli.publish_cmds import resolve_check_target
    from skyhub.registry import spec

    ids = resolve_check_target(arg)
    if len(ids) != 1:
        raise UsageError(f"{arg} registers {len(ids)} envs ({', '.join(ids)}); a run trains "
                         f"on one: pip install -e {arg}, then pass --env with one of those ids")
    spec(ids[0])
    if ids[0] != arg:
        console.print(f"env {ids[0]}: the package in {arg}, imported from that folder "
                      f"(pip install -e {arg} registers it for every process)", soft_wrap=True)
    return ids[0]


def train_cmd(
    overrides: Annotated[list[str] | None, typer.Argument(
        help="Config overrides as dotted key=value, e.g. optim.lr=2e-6 rollout.temperature=0.8 "
             "env.kwargs.n_words=3 (values are YAML: 3, 0.5, true, null, \\[a, b]); with "
             "--env, an undotted key=value is a kwarg of that env.", show_default=False)] = None,
    env: Annotated[str | None, typer.Option(
        "--env", help="Train on this env instead of the recipe's (its env kwargs are "
                      "cleared; key=value arguments without a dot are the new env's), and "
                      "evaluate on it unless env.eval_id= is given.", show_default=False)
    ] = None,
    env_kwarg: EnvKwargOpt = None,
    recipe: Annotated[str, typer.Option(
        help="A bundled recipe (tiny-cpu, sql-grpo-653) or the path of a YAML file.")
    ] = "tiny-cpu",
    out: Annotated[str | None, typer.Option(
        help="Where checkpoints, metrics.jsonl, curves.png and TensorBoard logs go "
             "(default: the recipe's loop.out).")] = None,
    print_config: Annotated[bool, typer.Option(
        "--print-config", help="Print the resolved config as YAML and exit.")] = False,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue from the newest checkpoint under --out.")] = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="--out holds another run: delete what it wrote and start "
                            "again.")] = False,
    list_recipes: Annotated[bool, typer.Option(
        "--list-recipes", help="List the bundled recipes and exit.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print where the learner ranks and the rollout engines go (which "
                          "GPUs, engines x tensor parallel, colocated or split, sleep) and "
                          "each device's memory, estimated from the model's config (nothing "
                          "loads); exit 2 if it does not fit.")] = False,
    devices: Annotated[str | None, typer.Option(
        help="With --dry-run: the devices of one node, COUNTxMEMORY (e.g. 8x80GB) or cpu "
             "(default: this machine's).", show_default=False)] = None,
    host_mem: Annotated[str | None, typer.Option(
        "--host-mem", help="With --dry-run: one node's RAM, e.g. 512GB (default: this "
                           "machine's); a plan whose host memory does not fit exits 2.",
        show_default=False)] = None,
) -> None:
    """Train a policy with PPO/GRPO on a skyhub env, as a recipe says.

    Examples:

      skyhub train --recipe tiny-cpu                  # learns toy-recall on a CPU in minutes

      skyhub train --recipe sql-grpo-653 --print-config

      skyhub train --recipe sql-grpo-653 --dry-run --devices 8x80GB

      skyhub train --recipe tiny-cpu dist.learner_ranks=2   # a sharded learner on 2 ranks

      skyhub train --recipe tiny-cpu loop.mode=async optim.lr=1e-3 --out runs/try2

      skyhub train --env toy-lookup max_turns=3 --out runs/lookup   # another env, same recipe
    """
    try:
        from skyhub.trainer.config import load_config, recipes, to_yaml
    except ImportError as e:  # pragma: no cover - depends on the install
        raise MissingDependency(f"skyhub train needs the trainer's dependencies ({e}); "
                                "install them with: pip install 'skyhub[train]'") from None
    console = Console(highlight=False)
    if list_recipes:
        for name in recipes():
            console.print(name)
        return
    items = list(overrides or [])
    env_kwargs: dict | None = None
    if env is not None:  # undotted key=value: the env's kwargs
        from skyhub.cli.kwargs import parse_kwargs

        env_kwargs = parse_kwargs([i for i in items if "." not in i.partition("=")[0]]
                                  + list(env_kwarg or []))
        items = [i for i in items if "." in i.partition("=")[0]]
        if "remote" not in env_kwargs:  # a served env need not be registered here
            env = _env_id(env, console)
    elif env_kwarg:  # -k KEY=VALUE: a kwarg of the recipe's env
        items += [f"env.kwargs.{pair}" for pair in env_kwarg]
    if out is not None:
        items.append(f"loop.out={out}")
    if resume:
        items.append("loop.resume=true")
    if overwrite:
        items.append("loop.overwrite=true")
    cfg = load_config(recipe, items, env_id=env, env_kwargs=env_kwargs)
    if print_config:
        typer.echo(to_yaml(cfg), nl=False)
        return
    if (devices is not None or host_mem is not None) and not dry_run:
        raise UsageError("--devices and --host-mem describe the machine for --dry-run; add "
                         "--dry-run")
    if dry_run:
        from skyhub.trainer.memory import parse_devices, placement

        plan = placement(cfg, parse_devices(devices), host_mem)
        typer.echo(plan.report())
        plan.check()  # a UsageError (exit 2) that says what to change
        return
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise MissingDependency(f"skyhub train needs torch and transformers ({e}); install "
                                "them with: pip install 'skyhub[train]'") from None
    from skyhub.trainer.loop import train

    ranks = cfg.dist.learner_ranks
    console.print(f"[bold]training[/bold] {cfg.env.id} with recipe {cfg.recipe} "
                  f"({cfg.loop.mode}, engine {cfg.rollout.engine}"
                  + (f", {ranks} learner ranks" if ranks > 1 else "") + f") -> {cfg.loop.out}",
                  soft_wrap=True)  # a path is never broken over lines
    s = train(cfg)
    if s is None:  # a node without rank 0: its ranks are done
        console.print(f"node {cfg.dist.node_rank}: learner ranks finished")
        return
    table = Table(title=f"{cfg.recipe}: {cfg.env.id}", title_justify="left")
    for col in ("steps", "reward (first step)", "reward (last 3)", "eval reward", "minutes"):
        table.add_column(col, justify="right")
    table.add_row(str(s.steps), f"{s.reward_first:.3f}", f"{s.reward_last:.3f}",
                  "-" if s.eval_reward is None else f"{s.eval_reward:.3f}",
                  f"{s.seconds / 60:.1f}")
    console.print(table)
    if s.eval_env:
        console.print(f"evaluated on {s.eval_env}", soft_wrap=True)
    console.print(f"metrics: {s.out / 'metrics.jsonl'}  curves: {s.out / 'curves.png'}  "
                  f"checkpoints: {s.out / 'checkpoints'}", soft_wrap=True)
