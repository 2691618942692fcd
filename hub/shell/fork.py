"""Forking a shell episode by copying its sandbox (`ShellEnv.fork`), not by replaying it.

A child of a terminal episode needs three things of its parent: the files (every place a
restore puts back), the shell's own state (working directory, variables, functions, aliases,
options, traps, umask) and the env's bookkeeping (turn, record, counters). This module moves
the first two into a *spare*: a sandbox of the same kind with a shell already started in it
(`spares.Spares`), so a fork costs a copy of what the episode changed, whatever the prefix
ran: a `sleep 2` in it costs nothing to fork.

- files: `Sandbox.export_places` once, `import_places` into each spare (with bwrap, /tmp and
  /dev/shm belong to the shell's own process tree: they travel inside the shell state);
- the shell: one command in the parent's shell prints its state (`export_shell`: builtins
  only, in a subshell, so the parent's shell is left as it was), and one command in the
  spare's shell recreates it (`import_shell`);
- the rest: `skyhub.fork.fork_by_copy` (the env's Python state, `ShellEnv.fork_state`).

What is not copied, and what happens then: processes. A shell with background jobs (`jobs`)
is forked by replay instead, which runs them again, as is a Harbor container running a
process its spare does not (a service the task's setup started); a process detached from a
terminal shell (`setsid`, `nohup ... & disown`) is not in the child (the documented limit).
Bash's own variables (`$RANDOM`'s seed, `$SECONDS`, `$LINENO`, `$BASHPID`...) are the child
shell's.
A backend that cannot copy its places (E2B; local without bwrap, whose workdir is a host path
of its own) also forks by replay.
"""

from __future__ import annotations

import base64
import re
import secrets
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skyhub.errors import ForkUnavailable, SandboxUnavailable
from skyhub.sandbox.local_scratch import MARKER_ENV

from .session import ShellSession

if TYPE_CHECKING:
    from skyhub.sandbox.base import Places

    from .env import ShellEnv

#: Variables a shell keeps for itself (dynamic, read-only, per process) or that skyhub's
#: session owns (history stays off; the sandbox's marker names its own sandbox): never
#: copied from the parent, never unset in the child. A `case` pattern.
OWN_VARIABLES = ("BASH|BASH_*|BASHOPTS|BASHPID|COLUMNS|LINES|COMP_WORDBREAKS|DIRSTACK|"
                 "EPOCHREALTIME|EPOCHSECONDS|EUID|FUNCNAME|GROUPS|HISTCMD|HISTFILE|HISTSIZE|"
                 "HISTFILESIZE|HOSTNAME|HOSTTYPE|LINENO|MACHTYPE|OSTYPE|PIPESTATUS|PPID|PWD|"
                 f"RANDOM|SECONDS|SHELLOPTS|SHLVL|SRANDOM|UID|_|__skyhub_*|{MARKER_ENV}")
#: What the parent's state may hold at most (its output is read whole, not capped).
MAX_STATE_BYTES = 64 << 20


@dataclass(frozen=True)
class ShellState:
    """A shell's state as `export_shell` read it, section by section (the exit trap's nonce
    written as `EXIT_MARKER`): `script_for` turns it into the bash that brings a fresh shell
    to it."""

    cwd: str
    jobs: int
    traps: str
    shopt: frozenset[str]
    options: frozenset[str]
    umask: str
    functions: str
    aliases: str
    variables: dict[str, str]  # name -> its `declare -p` line(s)
    private: str = ""  # base64 tar of the per-process places, "" when they are empty


EXIT_MARKER = "\x00exit-marker\x00"  # stands for the session's exit-trap nonce
_DECLARED = re.compile(r"declare -\S+ ([A-Za-z_][A-Za-z0-9_]*)")


#: Every variable name, by bash's own expansion (`${!A@}`: the names that start with A),
#: quoted so each is one word whatever $IFS is: no `compgen` in a command substitution.
_ALL_NAMES = " ".join(f'"${{!{c}@}}"' for c in
                     "_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def _export_command(sep: str, per_process: tuple[str, ...]) -> str:
    """Bash that prints the shell's background jobs, then a `sep` line, then its state in
    base64 (so no byte of it is changed by the terminal), sections separated by `sep`
    lines. The jobs are read in a command substitution of the shell itself (a pipeline's
    subshell sees none); the rest in the pipeline's subshell, which still shows the
    shell's traps and holds everything else, and whose variables die with it. Builtins
    only, but for base64 and, when the per-process places hold anything, tar."""
    end = f'\\builtin printf "\\n%s\\n" {shlex.quote(sep)}'
    values = (f'for __skyhub_n in {_ALL_NAMES}; do case $__skyhub_n in {OWN_VARIABLES}) ;; '
              '*) \\builtin declare -p "$__skyhub_n" 2>/dev/null && '
              f'\\builtin printf "\\n%s\\n" {shlex.quote(sep + "v")};; esac; done')
    # last, in the subshell only: globs that see every entry, to learn whether there is
    # anything to tar at all
    globs = " ".join(f"{shlex.quote(p)}/*" for p in per_process)
    tar = ('\\builtin unset -v GLOBIGNORE; \\builtin set +f; '
           '\\builtin shopt -s nullglob dotglob; \\builtin shopt -u failglob; '
           f'__skyhub_f=({globs}); if [ "${{#__skyhub_f[@]}}" -gt 0 ]; then '
           '\\command -p tar -b 1 -C / -cf - '
           f'{" ".join(shlex.quote(p.lstrip("/")) for p in per_process)} 2>/dev/null | '
           '\\command -p base64 -w0; fi') if per_process else ":"
    return (f'\\builtin printf "%s" "$(\\builtin jobs -p)"; {end}; '
            f'{{ \\builtin trap -p; {end}; \\builtin printf "%s" "$PWD"; {end}; '
            f'\\builtin shopt -p; {end}; \\builtin set +o; {end}; \\builtin umask -p; {end}; '
            f'\\builtin declare -f; {end}; \\builtin alias -p; {end}; '
            f'{values}; {end}; {tar}; }} 2>/dev/null | \\command -p base64 -w0')


def export_shell(session: ShellSession, per_process: tuple[str, ...] = ()) -> ShellState:
    """The state of the shell `session` drives (see the module docstring); `per_process`:
    directories the shell's process tree has its own of (bwrap's /tmp), copied as a tar.
    `ForkUnavailable` when the shell does not answer as a shell of ours does."""
    sep = f"--skyhub-state-{secrets.token_hex(8)}--"
    keep, session.max_output = session.max_output, MAX_STATE_BYTES
    try:
        r = session.run(_export_command(sep, per_process), timeout=30.0)
    finally:
        session.max_output = keep
    jobs, _, encoded = r.output.partition(f"\n{sep}\n")
    try:
        parts = base64.b64decode(encoded.strip(), validate=True).decode(
            "utf-8", "replace").split(f"\n{sep}\n")
    except ValueError:
        parts = []
    if r.exit_code != 0 or r.restarted or len(parts) != 9:
        raise ForkUnavailable(f"the shell's state could not be read (exit {r.exit_code}, "
                              f"{len(parts)} parts): {r.output[-300:]!r}")
    traps, cwd, shopt, options, umask, functions, aliases, values, private = parts
    nonce = _exit_nonce(session)  # the session's own exit trap: a child's names its own
    variables = {}
    for decl in values.split(f"\n{sep}v\n"):
        found = _DECLARED.match(decl)
        if found:
            variables[found.group(1)] = decl
    return ShellState(
        cwd=cwd, jobs=len(jobs.split()),
        traps=traps.replace(nonce, EXIT_MARKER) if nonce else traps,
        shopt=frozenset(shopt.splitlines()),
        options=frozenset(line for line in options.splitlines()
                          if not line.endswith((" history", " monitor"))),
        umask=umask.strip(), functions=functions.strip(), aliases=aliases.strip(),
        variables=variables, private=private.strip())


def script_for(state: ShellState, fresh: ShellState) -> str:
    """The bash that brings a fresh shell (whose state is `fresh`) to `state`: only what
    differs, so a fork of a shell the agent barely changed sends a few lines."""
    unset = sorted(set(fresh.variables) - set(state.variables))
    return "\n".join(filter(None, [
        # files first: tar and base64 are found through $PATH, which the variables replace
        (f"\\builtin printf %s {state.private} | \\command -p base64 -d | "
         "\\command -p tar -C / -xf - 2>/dev/null") if state.private else "",
        f"\\builtin cd -- {shlex.quote(state.cwd)}",  # before OLDPWD is set
        # options that change parsing, then functions before aliases (a function's body is
        # printed with the aliases of its time already expanded)
        *sorted(state.shopt - fresh.shopt), state.functions, state.aliases,
        f"\\builtin unset -v {' '.join(unset)}" if unset else "",
        *(decl for name, decl in sorted(state.variables.items())
          if fresh.variables.get(name) != decl),
        state.umask if state.umask != fresh.umask else "",
        state.traps if state.traps != fresh.traps else "",
        *sorted(state.options - fresh.options)]))


def _exit_nonce(session: ShellSession) -> str:
    """The nonce of the exit trap's marker of `session`'s shell (`\\036NONCE:exit\\037`)."""
    return session._exit_marker.decode().strip("\x1e\x1f").partition(":")[0]


def import_shell(session: ShellSession, script: str) -> None:
    """Run `script` (`script_for`) in the fresh shell `session` drives (a spare's)."""
    r = session.run(script.replace(EXIT_MARKER, _exit_nonce(session)), timeout=30.0)
    if r.exit_code is None or r.restarted:
        raise ForkUnavailable(f"the forked shell did not take its parent's state: "
                              f"{r.output[-300:]!r}")


def copy_problem(env: ShellEnv) -> str | None:
    """Why `env` cannot fork by a sandbox copy now (None: it can)."""
    if not env.fork_by_sandbox:
        return f"{type(env).__name__} forks by replay"
    if env._shell is None or env._sandbox is None or env._sandbox.closed:
        return "the episode has no shell"
    if env._broken is not None:
        return env._broken
    return env.sandbox_fork_problem(None)


def fork_shell(env: ShellEnv, n: int, factory: Any = None) -> list[Any]:
    """`ShellEnv.fork`: n children by sandbox copy, or by replay where it cannot (see the
    module docstring). A child that cannot be made closes those made and raises."""
    from skyhub.fork import check_forkable, fork, fork_by_copy

    check_forkable(env, n)
    why = copy_problem(env)
    places: Places | None = None
    if why is None:
        try:
            places = env._sandbox.export_places()
            state = export_shell(env._shell, places.per_process)
            if state.jobs:
                why = f"the shell has {state.jobs} background job(s), which a replay reruns"
        except (SandboxUnavailable, ForkUnavailable) as e:
            why = str(e)
    if why is not None:
        env.fork_note = why
        return fork(env, n, factory)
    assert places is not None
    children: list[Any] = []
    script: str | None = None
    try:
        for k in range(n):
            spares = env.spares()
            spare = spares.take(n)
            # what only a spare shows (Harbor: processes the spare does not have)
            why = env.sandbox_fork_problem(spare) if k == 0 else None
            if why is not None:
                spares.give_back(spare)
                env.fork_note = why
                return fork(env, n, factory)
            try:
                if spares.fresh is None:  # what a spare's shell holds before any import
                    spares.fresh = export_shell(spare.shell)
                if script is None:
                    script = script_for(state, spares.fresh)
                spare.sandbox.import_places(places)
                import_shell(spare.shell, script)
                spare.shell.cwd = state.cwd
            except BaseException:
                spare.close()
                raise
            child = fork_by_copy(env, means="sandbox copy")
            child._sandbox, child._clean, child._shell = spare.sandbox, spare.clean, spare.shell
            children.append(child)
    except BaseException:
        for child in children:
            child.close()
        raise
    return children


__all__ = ["MAX_STATE_BYTES", "OWN_VARIABLES", "ShellState", "copy_problem", "export_shell",
           "fork_shell", "import_shell", "script_for"]
