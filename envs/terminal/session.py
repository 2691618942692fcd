"""`ShellSession`: one persistent interactive bash in a sandbox, driven command by command.

bash runs on a pseudo-terminal made inside the sandbox by util-linux's `script` (present in
every Debian image), so Ctrl-C reaches the foreground job as it would for a person. Each
command is sent as one line, `eval "$(printf %s BASE64 | base64 -d)" </dev/null`, followed by a
`printf` of a marker with a fresh nonce, the exit status and `$PWD`:

- one line in, so a multi-line command, a heredoc or an unbalanced quote cannot leave the
  shell waiting for more input (a syntax error is just exit status 2);
- `eval` runs in the shell itself, so `cd`, variables, functions and background jobs persist;
- stdin is /dev/null, so `read`, a REPL or an editor gets end-of-file instead of hanging;
- the marker's nonce is new per command, so output cannot fake the end of a command.

A command past its timeout gets Ctrl-C; if the shell does not come back, Ctrl-\\; if it still
does not, the shell is replaced by a new one in the last working directory (the files stay:
only the shell's variables and jobs are lost) and the result says so.
"""

from __future__ import annotations

import base64
import re
import secrets
import shlex
import time
from dataclasses import dataclass

from skyhub.errors import InfraError
from skyhub.sandbox import agent
from skyhub.sandbox.base import ChannelBroken, Sandbox, Stream

#: The environment every session starts with: no pagers or editors that wait for a person.
SHELL_ENV = {"TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "MANPAGER": "cat",
             "EDITOR": "true", "VISUAL": "true", "GIT_EDITOR": "true", "LESS": "-FRX",
             "DEBIAN_FRONTEND": "noninteractive", "PYTHONUNBUFFERED": "1"}
_ANSI = re.compile(rb"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
START_TIMEOUT_S = 30.0
GRACE_S = 2.0


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


class ShellSession:
    """An interactive bash in `sandbox`. `run(command, timeout)` returns a `CommandResult`;
    raises `InfraError` only when no shell can be started at all."""

    def __init__(self, sandbox: Sandbox, *, cwd: str | None = None,
                 max_output: int = 16384) -> None:
        self.sandbox, self.max_output = sandbox, max_output
        self.cwd = cwd or sandbox.workdir
        self._stream: Stream | None = None
        self._pty = True
        self._exit_marker = b""
        self._start()

    # -- the shell ---------------------------------------------------------------------
    def _argv(self) -> list[str]:
        bash = "bash --noprofile --norc -i"
        return ["script", "-qfec", bash, "/dev/null"] if self._pty else bash.split()

    def _start(self) -> None:
        self.close()
        for attempt in range(2):
            try:
                self._stream = self.sandbox.open_stream(self._argv(), env=SHELL_ENV,
                                                        cwd=self.cwd)
                ready, gone = secrets.token_hex(6), secrets.token_hex(6)
                # the EXIT trap tells us at once when `exit` ends the shell (with a job still
                # holding the terminal, the stream itself would not end)
                self._exit_marker = f"\x1e{gone}:exit\x1f".encode()
                self._stream.write(
                    f"stty -echo 2>/dev/null; PS1=''; PS2=''; PROMPT_COMMAND=''; "
                    f"unset HISTFILE; set +m; trap \"printf '\\036{gone}:exit\\037\\n'\" EXIT; "
                    f"cd {shlex.quote(self.cwd)} 2>/dev/null; "
                    f"printf '\\036{ready}\\037\\n'\n".encode())
                self._read_until(f"\x1e{ready}\x1f".encode(), START_TIMEOUT_S)
                return
            except (ChannelBroken, TimeoutError) as e:
                self.close()
                if attempt == 0 and self._pty:  # no `script` in the image: plain pipes
                    self._pty = False
                    continue
                raise InfraError(f"cannot start bash in sandbox {self.sandbox.id}: {e}") from e

    def _read_until(self, marker: bytes | re.Pattern[bytes], timeout: float,
                    sink: agent._Capped | None = None) -> re.Match[bytes] | bytes:
        """Read until `marker` appears; what came before it goes to `sink`. TimeoutError if
        it does not come within `timeout` s."""
        assert self._stream is not None
        buf, deadline = bytearray(), time.monotonic() + timeout
        while True:
            found = marker.search(buf) if isinstance(marker, re.Pattern) else (
                marker if marker in buf else None)
            if found is not None:
                end = found.start() if isinstance(found, re.Match) else buf.index(marker)
                if sink is not None:
                    sink.add(bytes(buf[:end]))
                return found
            keep = 256  # a marker may straddle two reads
            if sink is not None and len(buf) > 4 * keep:
                sink.add(bytes(buf[:-keep]))
                del buf[:-keep]
            wait = deadline - time.monotonic()
            if wait <= 0:
                if sink is not None:
                    sink.add(bytes(buf))
                raise TimeoutError
            buf += self._stream.read(min(wait, 1.0))

    # -- commands ----------------------------------------------------------------------
    def run(self, command: str, timeout: float = 30.0) -> CommandResult:
        start = time.monotonic()
        out = agent._Capped(self.max_output)
        nonce = secrets.token_hex(8)
        done = re.compile(rb"\x1e" + nonce.encode() + rb":(\d+):([^\x1f]*)\x1f\r?\n|" +
                          re.escape(self._exit_marker))
        b64 = base64.b64encode(command.encode("utf-8", "replace")).decode()
        line = (f'eval "$(printf %s {b64} | base64 -d)" </dev/null; '
                f"printf '\\036{nonce}:%s:%s\\037\\n' \"$?\" \"$PWD\"\n")
        try:
            if self._stream is None:
                self._start()
            self._stream.write(line.encode())  # type: ignore[union-attr]
            m = self._read_until(done, timeout, out)
        except ChannelBroken:
            return self._lost(out, start, "the shell exited (e.g. `exit` or a killed bash)")
        except TimeoutError:
            return self._interrupt(out, start, done)
        assert isinstance(m, re.Match)
        if m.group(1) is None:
            return self._lost(out, start, "the shell exited (`exit`)")
        self.cwd = m.group(2).decode("utf-8", "replace") or self.cwd
        return CommandResult(printable(out.value()), int(m.group(1)), self.cwd,
                             duration_s=time.monotonic() - start)

    def _interrupt(self, out: agent._Capped, start: float,
                   done: re.Pattern[bytes]) -> CommandResult:
        """Ctrl-C, then Ctrl-\\, each followed by a fresh marker; then a new shell. The
        command's own marker, printed once the signal ends it, is cut from the output."""
        assert self._stream is not None
        for key in (b"\x03", b"\x1c"):
            nonce = secrets.token_hex(8)
            try:
                self._stream.write(key)
                time.sleep(0.1)
                self._stream.write(f"\nprintf '\\036{nonce}:%s\\037\\n' \"$PWD\"\n".encode())
                m = self._read_until(re.compile(rb"\x1e" + nonce.encode() +
                                                rb":([^\x1f]*)\x1f\r?\n"), GRACE_S, out)
            except TimeoutError:
                continue
            except ChannelBroken:
                break
            assert isinstance(m, re.Match)
            self.cwd = m.group(1).decode("utf-8", "replace") or self.cwd
            text = done.sub(b"", out.value())
            return CommandResult(printable(text), None, self.cwd, timed_out=True,
                                 duration_s=time.monotonic() - start)
        return self._lost(out, start, "the command did not stop on Ctrl-C", timed_out=True)

    def _lost(self, out: agent._Capped, start: float, why: str,
              timed_out: bool = False) -> CommandResult:
        self._start()  # in the last known working directory
        return CommandResult(printable(out.value()), None, self.cwd, timed_out=timed_out,
                             restarted=why, duration_s=time.monotonic() - start)

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def __enter__(self) -> ShellSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["SHELL_ENV", "CommandResult", "ShellSession", "printable"]
