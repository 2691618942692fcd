"""`ShellSession`: one persistent interactive bash in a sandbox, driven command by command.

bash runs on a pseudo-terminal made inside the sandbox by util-linux's `script` (present in
every Debian image), so Ctrl-C reaches the foreground job as it would for a person. Each
command is sent as one line, `eval "$(printf %s BASE64 | base64 -d)" </dev/null`, followed by a
`printf` of a marker with a fresh nonce, the exit status and `$PWD`:

- one line in, so a multi-line command, a heredoc or an unbalanced quote cannot leave the
  shell waiting for more input (a syntax error is just exit status 2); a long command (over
  `LINE_CHUNK` base64 characters) first goes in as short assignment lines, since a terminal
  keeps only 4095 characters of a line (`command_lines`);
- `eval` runs in the shell itself, so `cd`, variables, functions and background jobs persist;
- stdin is /dev/null, so `read`, a REPL or an editor gets end-of-file instead of hanging;
- the marker's nonce is new per command and secret from the command, so its output cannot
  fake its end (an early marker would hide its real exit status and the rest of its output).

Where the nonce could leak, and why it does not: it is typed only inside the line itself,
which the shell has read in full before the command runs (nothing of it waits in the terminal
for the command to read); the shell keeps no history (`set +o history`, HISTSIZE=0, no
HISTFILE, switched off again after every command, so a command that turns history on cannot
read the next line's nonce with `history` or `fc`); it is in no variable, no environment and
no process's argv (`printf` is a builtin: `ps`, /proc/*/cmdline and /proc/*/environ never see
it); the line's words are quoted, so an alias a command defines cannot rewrite them. The
marker the shell's EXIT trap prints (so that `exit` is noticed at once) is visible to a command
(`trap -p`), so it is only believed when the shell then stops answering: a command that prints
it keeps running and is judged by its real marker (a real `exit` while a background job holds
the terminal is therefore noticed only at the command's timeout).

The limit (documented, not fixable while commands run inside the shell): code that changes
the shell itself (a function named like a builtin, a DEBUG trap) runs at the shell's own next
statements, so it can misreport its own exit status and that of later commands. It fools only
the agent that planted it: time limits are enforced from the host, and verifiers run outside
this shell, after every process of the agent has been killed.

A command past its timeout gets Ctrl-C; if the shell does not come back, Ctrl-\\; if it still
does not, the shell is replaced by a new one in the last working directory (or the workdir,
if that is gone; the files stay: only the shell's variables and jobs are lost) and the result
says so.
"""

from __future__ import annotations

import base64
import contextlib
import re
import secrets
import shlex
import time
from dataclasses import dataclass

from skyhub.errors import ChannelBroken, InfraError
from skyhub.sandbox.base import Sandbox, Stream
from skyhub.sandbox.guest.procs import Capped

#: The environment every session starts with: no pagers or editors that wait for a person.
SHELL_ENV = {"TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "MANPAGER": "cat",
             "EDITOR": "true", "VISUAL": "true", "GIT_EDITOR": "true", "LESS": "-FRX",
             "DEBIAN_FRONTEND": "noninteractive", "PYTHONUNBUFFERED": "1"}
_ANSI = re.compile(rb"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
#: The shell. `--noediting`: no readline, which costs milliseconds per kilobyte of a line
#: (an agent's heredoc, a fork's state) and offers a model nothing (its commands arrive
#: base64-encoded, never typed key by key).
BASH = "bash --noprofile --norc --noediting -i"
START_TIMEOUT_S = 30.0
GRACE_S = 5.0  # for each key: a loaded machine may take seconds to answer


@dataclass(frozen=True)
class CommandResult:
    """What a command did. `exit_code` is None when it was interrupted or the shell lost."""

    output: str
    exit_code: int | None
    cwd: str
    timed_out: bool = False
    restarted: str | None = None
    duration_s: float = 0.0


def printable(data: bytes) -> str:
    """Terminal output as text an LLM can read: ANSI escapes dropped, CRLF made LF, invalid
    UTF-8 and control characters (binary output) shown as U+FFFD or `^X`."""
    text = _ANSI.sub(b"", data).replace(b"\r\n", b"\n").decode("utf-8", "replace")
    text = text.replace("\r", "\n")
    return _CONTROL.sub(lambda m: "^" + chr(ord(m.group()) ^ 0x40), text)


#: base64 characters per line sent to the shell: a terminal in canonical mode keeps at most
#: 4095 characters of a line and drops the rest, so a long command
#: goes in as several short lines, each well under that limit
LINE_CHUNK = 2048
_CMD_VAR = "__skyhub_cmd"


def command_lines(command: str, nonce: str) -> str:
    """The lines that run `command` in the shell and then print its marker (`nonce`, exit
    status, $PWD). A short command is one line; a long one is first accumulated, base64
    chunk by chunk, in a shell variable (`__skyhub_cmd`, unset after the command; the
    command can see it, it holds only the command itself), so that no line reaches the
    terminal's line limit. The words are quoted (an alias cannot rewrite them); after the
    marker, history goes off again before the shell reads the next line."""
    b64 = base64.b64encode(command.encode("utf-8", "replace")).decode()
    end = (f"\\builtin printf '\\036{nonce}:%s:%s\\037\\n' \"$?\" \"$PWD\"; ")
    if len(b64) <= LINE_CHUNK:
        return (f'\\eval "$(\\builtin printf %s {b64} | \\base64 -d)" </dev/null; {end}'
                "\\builtin set +o history\n")
    chunks = [b64[i:i + LINE_CHUNK] for i in range(0, len(b64), LINE_CHUNK)]
    lines = [f"{_CMD_VAR}{'+' if i else ''}='{c}'\n" for i, c in enumerate(chunks)]
    lines.append(f'\\eval "$(\\builtin printf %s "${_CMD_VAR}" | \\base64 -d)" </dev/null; '
                 f"{end}\\builtin unset {_CMD_VAR}; \\builtin set +o history\n")
    return "".join(lines)


def _markers(nonces: list[bytes]) -> re.Pattern[bytes]:
    """The marker of any of `nonces` (group 1: the nonce, group 2: $PWD)."""
    return re.compile(rb"\x1e(" + b"|".join(nonces) + rb"):([^\x1f]*)\x1f\r?\n")


class ShellSession:
    """An interactive bash in `sandbox`. `run(command, timeout)` returns a `CommandResult`;
    raises `InfraError` only when no shell can be started at all."""

    def __init__(self, sandbox: Sandbox, *, cwd: str | None = None,
                 max_output: int = 16384) -> None:
        self.sandbox, self.max_output = sandbox, max_output
        self.cwd = cwd or sandbox.workdir
        self._stream: Stream | None = None
        self._buf = bytearray()  # read from the shell, not yet consumed
        self._pty = True
        self._exit_marker = b""
        self._start()

    # -- the shell ---------------------------------------------------------------------
    def _start(self) -> None:
        """A new shell in `self.cwd`, else (e.g. the agent deleted it) in the workdir; with a
        pty, else plain pipes (no `script` in the image). InfraError when none starts."""
        self.close()
        tries = [(self.cwd, self._pty)] + ([(self.cwd, False)] if self._pty else [])
        if self.cwd != self.sandbox.workdir:
            tries.append((self.sandbox.workdir, self._pty))
        deadline, errors = time.monotonic() + START_TIMEOUT_S, []
        for cwd, pty in tries:
            try:
                self._open(cwd, pty, max(deadline - time.monotonic(), 2.0))
                self.cwd, self._pty = cwd, pty
                return
            except (ChannelBroken, TimeoutError, InfraError) as e:
                self.close()
                errors.append(f"{cwd} ({'pty' if pty else 'pipes'}): {e!r}")
        raise InfraError(f"cannot start bash in sandbox {self.sandbox.id}: "
                         f"{'; '.join(errors)}")

    def _open(self, cwd: str, pty: bool, timeout: float) -> None:
        argv = ["script", "-qfec", BASH, "/dev/null"] if pty else BASH.split()
        self._stream = self.sandbox.open_stream(argv, env=SHELL_ENV, cwd=cwd)
        self._buf.clear()
        ready, gone = secrets.token_hex(6), secrets.token_hex(6)
        # the EXIT trap tells us at once when `exit` ends the shell (with a job still
        # holding the terminal, the stream itself would not end); `trap -p` shows it to
        # commands, so its marker is only believed once the shell does not answer (`run`)
        self._exit_marker = f"\x1e{gone}:exit\x1f".encode()
        self._stream.write(
            f"stty -echo 2>/dev/null; set +o history; unset HISTFILE; HISTSIZE=0; "
            f"HISTFILESIZE=0; PS1=''; PS2=''; PROMPT_COMMAND=''; set +m; "
            f"trap \"printf '\\036{gone}:exit\\037\\n'\" EXIT; "
            f"cd {shlex.quote(cwd)} 2>/dev/null; "
            f"printf '\\036{ready}\\037\\n'\n".encode())
        self._read_until(re.compile(re.escape(f"\x1e{ready}\x1f".encode()) + rb"\r?\n"),
                         timeout)

    def _read_until(self, marker: re.Pattern[bytes], timeout: float,
                    sink: Capped | None = None) -> re.Match[bytes]:
        """Read until `marker` appears; what came before it goes to `sink` (or is dropped),
        what came after it stays buffered for the next read. TimeoutError if it does not come
        within `timeout` s."""
        assert self._stream is not None
        deadline = time.monotonic() + timeout
        while True:
            found = marker.search(bytes(self._buf))
            if found is not None:
                if sink is not None:
                    sink.add(bytes(self._buf[:found.start()]))
                del self._buf[:found.end()]
                return found
            keep = 256  # a marker may straddle two reads
            if len(self._buf) > 4 * keep:
                if sink is not None:
                    sink.add(bytes(self._buf[:-keep]))
                del self._buf[:-keep]
            wait = deadline - time.monotonic()
            if wait <= 0:
                if sink is not None:
                    sink.add(bytes(self._buf))
                self._buf.clear()
                raise TimeoutError
            self._buf += self._stream.read(min(wait, 1.0))

    # -- commands ----------------------------------------------------------------------
    def run(self, command: str, timeout: float = 30.0) -> CommandResult:
        start = time.monotonic()
        deadline = start + timeout
        out = Capped(self.max_output)
        nonce = secrets.token_hex(8)
        done = re.compile(rb"\x1e" + nonce.encode() + rb":(\d+):([^\x1f]*)\x1f\r?\n")
        line = command_lines(command, nonce)
        probe: re.Pattern[bytes] | None = None
        try:
            if self._stream is None:
                self._start()
            self._buf.clear()  # what came between commands (a background job's output)
            self._stream.write(line.encode())  # type: ignore[union-attr]
            while True:
                wait = [done.pattern, re.escape(self._exit_marker)]
                if probe is not None:
                    wait.append(probe.pattern)
                m = self._read_until(re.compile(b"|".join(wait)), deadline - time.monotonic(),
                                     out)
                if done.fullmatch(m.group(0)):
                    break
                if probe is not None and probe.fullmatch(m.group(0)):
                    # the shell answers, but this command's marker never came (a command
                    # that rewired the shell's builtins): the command is over, its status
                    # is unknown
                    return CommandResult(printable(out.value()), None, self.cwd,
                                         duration_s=time.monotonic() - start)
                # the EXIT trap's marker, or a command that printed it (`trap -p` shows it):
                # a shell that has really exited never answers this probe
                out.add(m.group(0))
                if probe is None:
                    tag = secrets.token_hex(8)
                    probe = re.compile(rb"\x1e" + tag.encode() + rb":probe\x1f\r?\n")
                    self._stream.write(  # type: ignore[union-attr]
                        f"\\builtin printf '\\036{tag}:probe\\037\\n'\n".encode())
        except ChannelBroken:
            return self._lost(out, start, "the shell exited (e.g. `exit` or a killed bash)",
                              strip=self._exit_marker)
        except TimeoutError:
            if probe is not None:  # the exit marker came and the shell never answered again
                return self._lost(out, start, "the shell exited (`exit`)",
                                  strip=self._exit_marker)
            return self._interrupt(out, start, done)
        if probe is not None:  # it answers the probe after this line: not part of any output
            with contextlib.suppress(TimeoutError, ChannelBroken):
                self._read_until(probe, GRACE_S)
            self._buf.clear()
        self.cwd = m.group(2).decode("utf-8", "replace") or self.cwd
        return CommandResult(printable(out.value()), int(m.group(1)), self.cwd,
                             duration_s=time.monotonic() - start)

    def _interrupt(self, out: Capped, start: float,
                   done: re.Pattern[bytes]) -> CommandResult:
        """Ctrl-C, then Ctrl-\\, each followed by a fresh marker; then a new shell. The
        command's own marker, printed once the signal ends it, is cut from the output. A
        marker is believed whichever key it followed: on a loaded machine the shell may
        answer Ctrl-C's only after Ctrl-\\ was sent, and is alive all the same."""
        assert self._stream is not None
        sent: list[bytes] = []
        for key in (b"\x03", b"\x1c"):
            sent.append(secrets.token_hex(8).encode())
            try:
                self._stream.write(key)
                time.sleep(0.1)
                self._stream.write(
                    f"\n\\builtin printf '\\036{sent[-1].decode()}:%s\\037\\n' \"$PWD\"\n"
                    .encode())
                m = self._read_until(_markers(sent), GRACE_S, out)
            except TimeoutError:
                continue
            except ChannelBroken:
                break
            later = sent[sent.index(m.group(1)) + 1:]
            if later:  # the markers typed after this one come too: output of nothing
                with contextlib.suppress(TimeoutError, ChannelBroken):
                    self._read_until(_markers(later), GRACE_S)
                self._buf.clear()
            self.cwd = m.group(2).decode("utf-8", "replace") or self.cwd
            text = done.sub(b"", out.value())
            return CommandResult(printable(text), None, self.cwd, timed_out=True,
                                 duration_s=time.monotonic() - start)
        return self._lost(out, start, "the command did not stop on Ctrl-C", timed_out=True)

    def _lost(self, out: Capped, start: float, why: str, timed_out: bool = False,
              strip: bytes = b"") -> CommandResult:
        """A new shell; the result of the command the old one was running. `strip`: the old
        shell's exit marker, which is no output of the command."""
        text = out.value().replace(strip, b"") if strip else out.value()
        self._start()  # in the last known working directory
        return CommandResult(printable(text), None, self.cwd, timed_out=timed_out,
                             restarted=why, duration_s=time.monotonic() - start)

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def __enter__(self) -> ShellSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["BASH", "LINE_CHUNK", "SHELL_ENV", "CommandResult", "ShellSession", "command_lines",
           "printable"]
