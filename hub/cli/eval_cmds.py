"""`skyhub eval`: benchmark an agent on an env, compare runs, run a suite, rebuild a report.

    skyhub eval sql-spider --agent openai:my-model --base-url http://localhost:8000/v1
    skyhub eval compare runs/eval/before runs/eval/after
    skyhub eval suite skyrl-sql --agent hf:./checkpoint
    skyhub eval report runs/eval/before

`skyhub eval ENV_ID ...` is short for `skyhub eval run ENV_ID ...`: the group falls back to
`run` when its first argument is not a subcommand, so the common case stays one word.

Over ~400 lines, for a reason: one command group, `skyhub eval`, whose subcommands share
the run's console output (summary tables, progress, failures).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from skyhub.cli.kwargs import EnvKwargOpt, env_kwargs_of
from skyhub.errors import DataNotFound, UsageError


class _RunByDefault(TyperGroup):
    """A group whose first argument, when it names no subcommand, is the env id of `run`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # ctx: a click Context
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


eval_app = typer.Typer(
    cls=_RunByDefault, no_args_is_help=True,
    help="Benchmark agents: `skyhub eval ENV_ID --agent AGENT` (short for `eval run`), "
         "`eval compare`, `eval suite`, `eval report`.")

KwargsArg = Annotated[list[str] | None, typer.Argument(
    help="Env kwargs as key=value, e.g. data_dir=~/spider split=dev.", show_default=False)]
AgentOpt = Annotated[str, typer.Option(
    "--agent", "-a", show_default=False,
    help="Required. oracle (the env's reference solutions), nop, random, "
         "script:module:function, openai:MODEL (any OpenAI-compatible server, with "
         "--base-url; key from $OPENAI_API_KEY), hf:PATH (a local transformers model).")]
ModelOpt = Annotated[str | None, typer.Option(
    "--model", "-m", show_default=False,
    help="The model of a model agent: `-a openai -m gpt-4o` is `-a openai:gpt-4o`, "
         "`-a hf -m ./ckpt` is `-a hf:./ckpt`.")]
AttemptsOpt = Annotated[int, typer.Option(
    "--attempts", min=1, help="Episodes per task; the summary adds pass@k.")]
BaseUrlOpt = Annotated[str | None, typer.Option(
    help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (default "
         "$OPENAI_BASE_URL, else OpenAI).")]
ApiKeyOpt = Annotated[str | None, typer.Option(
    help="API key (default $OPENAI_API_KEY; local servers need none).")]
TemperatureOpt = Annotated[float | None, typer.Option(
    help="Sampling temperature of model agents (default 0: greedy).")]
MaxTokensOpt = Annotated[int | None, typer.Option(help="Max tokens per model reply.")]
TimeoutOpt = Annotated[float | None, typer.Option(
    help="Seconds a model request may take in all, retries included (default 120); an "
         "endpoint that never answers within it stops the run.")]
AttemptTimeoutOpt = Annotated[float | None, typer.Option(
    help="Seconds one attempt of a model request may wait before it is retried (default: "
         "half of --timeout).")]
StopOpt = Annotated[list[str] | None, typer.Option(
    "--stop", help="A stop string of model agents (repeatable; default: the env's, or a "
                   "training run's rollout.stop for hf:RUN_DIR).", show_default=False)]
OverwriteOpt = Annotated[bool, typer.Option(
    "--overwrite", help="--out holds another run: delete what it wrote (run.json, "
                        "episodes.jsonl, summary.json, reports, plots) and start again.")]
RetriesOpt = Annotated[int | None, typer.Option(
    help="Retries of a failing model request (backoff; then the episode is an infra error).")]
ConcurrencyOpt = Annotated[int, typer.Option(help="Episodes (and model requests) at once.")]
ToolsOpt = Annotated[bool | None, typer.Option(
    "--tools/--no-tools", show_default=False,
    help="Act with native tool calls (env.tools) or the text protocol; default: tools where "
         "the env declares them and the agent speaks them (openai:, unless the server "
         "rejects tools).")]
SeedOpt = Annotated[int, typer.Option(help="Episode k is reset with seed SEED+k.")]


def _console() -> Console:
    return Console(highlight=False)


def agent_spec(agent: str, model: str | None) -> str:
    """`--agent` with `--model` folded in (`openai` + `gpt-4o` -> `openai:gpt-4o`)."""
    if model is None:
        return agent
    if ":" in agent:
        raise typer.BadParameter(f"--agent {agent} already names its model; drop --model, or "
                                 f"write --agent {agent.split(':')[0]} --model {model}",
                                 param_hint="--model")
    if agent in ("oracle", "nop", "random"):
        raise typer.BadParameter(f"--agent {agent} takes no model", param_hint="--model")
    return f"{agent}:{model}"


def resolve_env_target(arg: str) -> str:
    """`skyhub eval ARG`: an env id, or the folder of an env package (as `skyhub check`
    takes it: its envs are registered from that folder); one env per evaluation."""
    from skyhub.cli.publish_cmds import resolve_check_target

    ids = resolve_check_target(arg)
    if len(ids) != 1:
        raise UsageError(f"{arg} registers {len(ids)} envs ({', '.join(ids)}); an evaluation "
                         f"runs one: pip install -e {arg}, then pass one of those ids")
    return ids[0]


def _agent(spec: str, seed: int, **options: Any) -> Any:
    from skyhub.eval.agents import load_agent

    try:
        return load_agent(spec, seed=seed, **options)
    except ValueError as e:
        if isinstance(e, UsageError):
            raise
        raise typer.BadParameter(str(e), param_hint="--agent") from None


def _harness_agent(harness: str, spec: str, **options: Any) -> Any:
    """`--harness NAME -a openai:MODEL`: the harness as the run's agent."""
    from skyhub.eval.harness_agent import HarnessAgent

    kind, _, model = spec.partition(":")
    if kind != "openai" or not model:
        raise typer.BadParameter(f"--harness {harness} drives a model over the OpenAI API: "
                                 "pass --agent openai:MODEL (with --gateway or --base-url)",
                                 param_hint="--agent")
    kwargs = {k: options.pop(k) for k in ("temperature", "max_tokens")}
    if harness == "builtin":
        options.update({k: v for k, v in kwargs.items() if v is not None})
    return HarnessAgent(harness, model, **options)


def _default_out(env_id: str, agent: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", agent).strip("_")[:60]
    return Path("runs") / "eval" / f"{env_id}-{safe}-{time.strftime('%Y%m%d-%H%M%S')}"


def _num(x: float) -> str:
    return "n/a" if x is None or x != x or x in (float("inf"), float("-inf")) else f"{x:.3f}"


def _interval(ci: Any) -> str:
    lo, hi = ci
    return "n/a" if "n/a" in (_num(lo), _num(hi)) else f"[{_num(lo)}, {_num(hi)}]"


def _summary_table(title: str, s: Any) -> Table:
    """One row per figure (so it fits 80 columns whatever it holds): accuracy with its own
    (Wilson) interval, mean reward with its own (normal) one, pass@k with several attempts."""
    table = Table(title=title, title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_row("episodes", f"{s.n}" if s.complete else f"{s.n} of {s.requested}", "")
    clustered = getattr(s, "ci95_method", "").startswith("clustered")
    table.add_row("accuracy" + (" (CI by task)" if clustered else ""), _num(s.accuracy),
                  _interval(s.ci95))
    table.add_row("mean reward", _num(s.mean_reward), _interval(s.mean_reward_ci95))
    for k, v in (getattr(s, "pass_at_k", None) or {}).items():
        if k.startswith("pass@"):
            table.add_row(k, _num(v), "")
    for name, m in (getattr(s, "rewards", None) or {}).items():  # named rewards
        table.add_row(f"{name} (mean, n={m['n']})", _num(m["mean"]), "")
    table.add_row("mean turns", f"{s.mean_turns:.2f}", "")
    table.add_row("infra errors", str(s.infra_errors), "")
    table.add_row("seconds", f"{s.seconds:.1f}", "")
    return table


def _print_sampling(console: Console, summary: Any) -> None:
    """The model agent's sampling settings and their sources, on one line under the table."""
    if getattr(summary, "sampling", None):
        console.print(Text(f"sampling: {summary.sampling}"), soft_wrap=True)
    if getattr(summary, "protocol", None) == "tools":
        console.print("protocol: tools (native tool calls)")


def _no_score_exit(console: Console, summary: Any) -> None:
    """A run with no scored episode has no result: say why and exit 2."""
    if summary.scored == 0:
        console.print(Text(f"error: {summary.message}. Fix the cause and rerun with --resume "
                           "(it reruns the infra errors).", style="red"))
        raise typer.Exit(2)


def evaluate_with_progress(env_id: str, agent: Any, *, console: Console, n: int | None,
                           concurrency: int, seed: int, env_kwargs: dict[str, Any],
                           out: Path, resume: bool, attempts: int = 1,
                           overwrite: bool = False,
                           rerun_errors: list[str] | None = None,
                           tools: bool | None = None) -> Any:
    """`evaluate.run` under a progress bar showing accuracy so far and infra errors; the
    agent's notices (each retry of a model request) print above the bar as they happen."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from skyhub.eval import harness as evaluate

    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(),
               "acc {task.fields[acc]}", "infra {task.fields[infra]}", TimeElapsedColumn())
    seen = {"ok": 0, "scored": 0, "infra": 0}
    with Progress(*columns, console=console, transient=False) as progress:
        bars: list[Any] = []  # the bar appears once the envs exist and the plan is known

        def total(todo: int) -> None:
            bars.append(progress.add_task(f"{env_id} / {agent.name}", total=todo, acc="-",
                                          infra=0))

        def tick(ep: Any) -> None:
            if ep.infra_error:
                seen["infra"] += 1
            else:
                seen["scored"] += 1
                seen["ok"] += ep.outcome == "success"
            acc = f"{seen['ok'] / seen['scored']:.3f}" if seen["scored"] else "-"
            progress.update(bars[0], advance=1, acc=acc, infra=seen["infra"])

        def says(sentence: str) -> None:
            progress.console.print(f"tasks: {sentence}"
                                   + (f", {attempts} attempts each" if attempts > 1 else ""))

        def notice(line: str) -> None:
            progress.console.print(Text(line, style="yellow"), soft_wrap=True)

        agent.on_notice = notice
        try:
            summary, episodes = evaluate.run(env_id, agent, n=n, concurrency=concurrency,
                                             seed=seed, env_kwargs=env_kwargs,
                                             on_episode=tick, out=out, resume=resume,
                                             on_plan=total, attempts=attempts,
                                             on_sample=says, overwrite=overwrite,
                                             rerun_errors=rerun_errors, tools=tools)
        finally:
            agent.on_notice = None
    _print_failures(console, episodes)
    return summary


def _print_failures(console: Console, episodes: list[Any], limit: int = 20) -> None:
    """One line per episode that did not succeed: the env's `why` (e.g. Harbor's: a build
    error, the verifier's exit, a missing reward file, with the log path), else its error."""
    lines = []
    for ep in episodes:
        if ep.outcome == "success":
            continue
        info = ep.final_info or {}
        why = info.get("why") or (str(info.get("error") or "").strip().splitlines() or [""])[0]
        if why:
            kind = "infra error" if ep.infra_error else ep.outcome
            lines.append(f"  {ep.task_id}: {kind}: {why}")
    if not lines:
        return
    console.print(f"why {len(lines)} episode{'s' if len(lines) != 1 else ''} did not succeed:")
    for line in lines[:limit]:
        console.print(Text(line), soft_wrap=True)  # one line each, however long
    if len(lines) > limit:
        console.print(f"  ... and {len(lines) - limit} more (episodes.jsonl has them all)")


@eval_app.command("run")
def run_cmd(
    env_id: Annotated[str, typer.Argument(
        help="The env id, e.g. sql-spider, or the folder of an env package.")],
    agent: AgentOpt,
    kwargs: KwargsArg = None,
    env_kwarg: EnvKwargOpt = None,
    model: ModelOpt = None,
    n: Annotated[int | None, typer.Option(
        "--n", help="Tasks: a seeded sample of N, spread over the dataset's slices (e.g. "
                    "its databases); default: every task once.")] = None,
    attempts: AttemptsOpt = 1,
    n_attempts: Annotated[int | None, typer.Option(
        "--n-attempts", min=1, show_default=False,
        help="Harbor's name for --attempts.")] = None,
    max_turns: Annotated[int | None, typer.Option(
        help="Passed to the env as max_turns= (SkyRL-SQL's protocol uses 5).")] = None,
    concurrency: ConcurrencyOpt = 8,
    seed: SeedOpt = 0,
    out: Annotated[Path | None, typer.Option(
        help="Run directory: episodes.jsonl, summary.json, report.md/.html, plots/ (default: "
             "in runs/eval/, named ENV-AGENT-TIME).")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the run in --out: only missing episodes and infra errors "
                         "are run.")] = False,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    temperature: TemperatureOpt = None,
    max_tokens: MaxTokensOpt = None,
    timeout: TimeoutOpt = None,
    attempt_timeout: AttemptTimeoutOpt = None,
    max_retries: RetriesOpt = None,
    stop: StopOpt = None,
    overwrite: OverwriteOpt = False,
    report: Annotated[bool, typer.Option(help="Write report.md, report.html and plots.")] = True,
    jobs_dir: Annotated[Path | None, typer.Option(
        help="Also write the run as a Harbor job folder, JOBS_DIR/<--out's name>/ (Harbor's "
             "viewer and scripts read it).")] = None,
    filter_error_type: Annotated[list[str] | None, typer.Option(
        "--filter-error-type", show_default=False,
        help="With --resume: re-run only the infra errors of this type (repeatable, e.g. "
             "SandboxUnavailable, AgentError); default: every infra error.")] = None,
    tools: ToolsOpt = None,
    harness: Annotated[str | None, typer.Option(
        show_default=False,
        help="Play each episode with this agent loop (skyhub.harness: builtin, terminus, "
             "mini-swe-agent, or command:'PROGRAM' using OPENAI_BASE_URL); --agent "
             "openai:MODEL names its model, reached through --gateway or --base-url.")] = None,
    gateway: Annotated[str | None, typer.Option(
        show_default=False,
        help="With --harness: a `skyhub gateway` URL (e.g. http://127.0.0.1:8100); each "
             "episode gets its own session there, which records its exact tokens.")] = None,
    gateway_token: Annotated[str | None, typer.Option(
        show_default=False,
        help="The gateway's token (default: $SKYHUB_GATEWAY_TOKEN).")] = None,
    best_of: Annotated[int | None, typer.Option(
        "--best-of", min=2, show_default=False,
        help="Play each task to --branch-at's turn, fork the episode into N branches "
             "(env.fork) and play each to its end: a task succeeds when its best branch "
             "does (skyhub.eval.best_of).")] = None,
    branch_at: Annotated[int | None, typer.Option(
        "--branch-at", min=0, show_default=False,
        help="With --best-of: the turn at which the episode forks (0: right after reset).")]
        = None,
) -> None:
    """Evaluate an agent on an env (episodes concurrently), then a table and a report.

    Each episode is saved as it finishes: after Ctrl-C or a crash, --resume continues."""
    from skyhub.registry import spec

    if resume and out is None:
        raise typer.BadParameter("--resume needs the --out directory of the run to continue",
                                 param_hint="--resume")
    env_kwargs = env_kwargs_of(kwargs, env_kwarg)
    if "remote" not in env_kwargs:  # a served env need not be registered here
        env_id = resolve_env_target(env_id)
        spec(env_id)  # an unknown id fails here, before anything starts
    if max_turns is not None:
        env_kwargs["max_turns"] = max_turns
    if resume and overwrite:
        raise typer.BadParameter("--resume continues the run in --out, --overwrite deletes "
                                 "it: pass one of them", param_hint="--overwrite")
    if n_attempts is not None:
        if attempts not in (1, n_attempts):
            raise typer.BadParameter(f"--attempts {attempts} and --n-attempts {n_attempts}: "
                                     "they are the same option, pass one",
                                     param_hint="--n-attempts")
        attempts = n_attempts
    if filter_error_type and not resume:
        raise typer.BadParameter("--filter-error-type chooses what --resume re-runs: add "
                                 "--resume --out RUN_DIR", param_hint="--filter-error-type")
    if harness is not None:
        the_agent = _harness_agent(harness, agent_spec(agent, model), gateway=gateway,
                                   gateway_token=gateway_token, base_url=base_url,
                                   api_key=api_key, temperature=temperature,
                                   max_tokens=max_tokens)
    elif gateway is not None:
        raise typer.BadParameter("--gateway is where a --harness's model is: add --harness "
                                 "(e.g. builtin), or use --base-url for an agent",
                                 param_hint="--gateway")
    else:
        the_agent = _agent(agent_spec(agent, model), seed, base_url=base_url,
                           api_key=api_key, temperature=temperature, max_tokens=max_tokens,
                           timeout=timeout, attempt_timeout=attempt_timeout,
                           max_retries=max_retries, stop=stop)
    out = out if out is not None else _default_out(env_id, the_agent.name)
    console = _console()
    if best_of is not None or branch_at is not None:
        try:
            from skyhub.cli.best_of_run import run_best_of

            run_best_of(env_id, the_agent, console=console, n=best_of, branch_at=branch_at,
                         tasks=n, seed=seed, env_kwargs=env_kwargs, concurrency=concurrency,
                         out=out, other=dict(harness=harness, resume=resume, tools=tools,
                                             attempts=attempts > 1, jobs_dir=jobs_dir))
        finally:
            the_agent.close()
        return
    try:
        summary = evaluate_with_progress(env_id, the_agent, console=console, n=n,
                                         concurrency=concurrency, seed=seed,
                                         env_kwargs=env_kwargs, out=out, resume=resume,
                                         attempts=attempts, overwrite=overwrite,
                                         rerun_errors=filter_error_type, tools=tools)
    except KeyboardInterrupt:
        if (out / "episodes.jsonl").is_file():
            _write_job(out, jobs_dir, concurrency, console)
            console.print(Text(f"interrupted: the finished episodes are in {out}/episodes"
                               ".jsonl; continue with the same command and --resume "
                               f"--out {out}", style="yellow"))
        else:
            console.print(Text("interrupted before any episode finished; nothing was saved",
                               style="yellow"))
        raise typer.Exit(130) from None
    finally:
        the_agent.close()
    console.print(_summary_table(f"{env_id}: {the_agent.name}", summary))
    _print_sampling(console, summary)
    console.print(f"episodes: {out / 'episodes.jsonl'}  summary: {out / 'summary.json'}")
    _write_job(out, jobs_dir, concurrency, console)
    if report:
        _write_report(out, console)
    _no_score_exit(console, summary)


def _write_job(run_dir: Path, jobs_dir: Path | None, concurrency: int,
               console: Console) -> None:
    if jobs_dir is not None:
        from skyhub.eval.harbor_jobs import write_job

        console.print(f"harbor job: {write_job(run_dir, jobs_dir, n_concurrent=concurrency)}")


def _write_report(run_dir: Path, console: Console) -> None:
    from skyhub.eval.report import write_report

    paths = write_report(run_dir)
    console.print(f"report: {paths['markdown']} and {paths['html']}")


@eval_app.command("report")
def report_cmd(run_dir: Annotated[Path, typer.Argument(help="A run's --out directory.")]) -> None:
    """Write (again) a run's report.md, report.html and plots from its episodes.jsonl."""
    _write_report(run_dir, _console())


@eval_app.command("compare")
def compare_cmd(
    runs: Annotated[list[Path], typer.Argument(
        help="Run directories; the first is the baseline the others are compared with.")],
    out: Annotated[Path | None, typer.Option(
        help="Also write the comparison as Markdown (FILE.md) and JSON (FILE.json).")] = None,
) -> None:
    """Compare runs side by side, with paired significance against the first.

    Accuracy with 95% CI per run; for each run against the first, the paired difference with
    its bootstrap CI, McNemar's exact p and a sign-flip test p."""
    from skyhub.eval.compare import compare_runs
    from skyhub.json_safe import dumps

    if len(runs) < 2:
        raise typer.BadParameter("give at least two run directories", param_hint="RUNS")
    comparison = compare_runs(runs)
    _console().print(comparison.to_rich_table())
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".md").write_text(comparison.to_markdown() + "\n")
        out.with_suffix(".json").write_text(dumps(comparison.to_dict(), indent=2) + "\n")
        _console().print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.json')}")


@eval_app.command("suite")
def suite_cmd(
    name: Annotated[str | None, typer.Argument(help="The suite, e.g. skyrl-sql.")] = None,
    agent: Annotated[str | None, typer.Option(
        "--agent", "-a", show_default=False,
        help="Required (but with --list): the agent, as in `skyhub eval run`.")] = None,
    model: ModelOpt = None,
    n: Annotated[int | None, typer.Option(
        "--n", help="Episodes per run (default: every task of each dataset).")] = None,
    only: Annotated[list[str] | None, typer.Option(
        help="Run only these columns (repeatable), e.g. --only Spider-Dev.")] = None,
    concurrency: ConcurrencyOpt = 8,
    seed: SeedOpt = 0,
    out: Annotated[Path | None, typer.Option(
        help="Directory for one run directory per column plus the suite report.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue each run in --out.")] = False,
    overwrite: OverwriteOpt = False,
    data_dir: Annotated[Path | None, typer.Option(
        help="The root every run finds its dataset under, passed to each env as data_dir= "
             "(e.g. for skyrl-sql: OmniSQL's data/, or the folder holding it: spider/, "
             "Spider-DK/, spider-realistic/, Spider-Syn/; default: $SKYHUB_DATA's own "
             "folders, else the bundled data).")] = None,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    temperature: TemperatureOpt = None,
    max_tokens: MaxTokensOpt = None,
    timeout: TimeoutOpt = None,
    attempt_timeout: AttemptTimeoutOpt = None,
    max_retries: RetriesOpt = None,
    stop: StopOpt = None,
    list_suites: Annotated[bool, typer.Option("--list", help="List the suites and exit.")] = False,
) -> None:
    """Run an evaluation suite: a paper's results table, next to its published rows.

    Every dataset of the suite under its protocol (e.g. skyrl-sql: 5 turns on five Spider
    variants); datasets not downloaded show "no data" with the command that gets them."""
    from skyhub.eval.report import write_suite_report
    from skyhub.eval.suites import get_suite
    from skyhub.eval.suites import list_suites as all_suites

    console = _console()
    if list_suites or name is None:
        table = Table(title="evaluation suites", title_justify="left")
        for col in ("name", "runs", "description"):
            table.add_column(col)
        for s in all_suites():
            table.add_row(s.name, ", ".join(r.name for r in s.runs), Text(s.description))
        console.print(table)
        return
    if agent is None:
        raise typer.BadParameter("which agent? e.g. --agent oracle, -a openai -m MODEL, "
                                 "-a hf:./checkpoint", param_hint="--agent")
    if resume and overwrite:
        raise typer.BadParameter("--resume continues the runs in --out, --overwrite deletes "
                                 "them: pass one of them", param_hint="--overwrite")
    suite = get_suite(name)
    runs = [suite.run(c) for c in only] if only else list(suite.runs)
    the_agent = _agent(agent_spec(agent, model), seed, base_url=base_url, api_key=api_key,
                       temperature=temperature, max_tokens=max_tokens, timeout=timeout,
                       attempt_timeout=attempt_timeout, max_retries=max_retries, stop=stop)
    out = out if out is not None else _default_out(suite.name, the_agent.name)
    run_dirs: dict[str, Path | None] = {r.name: None for r in suite.runs}
    unscored: list[Any] = []  # summaries of columns without a scored episode
    try:
        for r in runs:
            kwargs = dict(r.kwargs)
            if data_dir is not None:
                kwargs["data_dir"] = str(data_dir.expanduser())
            if r.max_turns is not None:
                kwargs["max_turns"] = r.max_turns
            try:
                summary = evaluate_with_progress(
                    r.env_id, the_agent, console=console, n=n, concurrency=concurrency,
                    seed=seed, env_kwargs=kwargs, out=out / r.name, resume=resume,
                    overwrite=overwrite, tools=False)  # a suite is its datasets' protocol
            except DataNotFound as e:
                console.print(Text(f"{r.name}: no data, skipped ({e})", style="yellow"))
                continue
            run_dirs[r.name] = out / r.name
            console.print(_summary_table(f"{suite.name} / {r.name}: {the_agent.name}", summary))
            _print_sampling(console, summary)
            if summary.scored == 0:
                unscored.append(summary)
    except KeyboardInterrupt:
        console.print(Text(f"interrupted: continue with the same command and --resume --out "
                           f"{out}", style="yellow"))
        raise typer.Exit(130) from None
    finally:
        the_agent.close()
    for d in run_dirs.values():
        if d is not None:
            _write_report(d, console)
    paths = write_suite_report(out, suite, run_dirs, label=the_agent.name)
    console.print(f"suite report: {paths['markdown']} and {paths['html']}")
    ran = [d for d in run_dirs.values() if d is not None]
    if unscored and len(unscored) == len(ran):
        _no_score_exit(console, unscored[0])
