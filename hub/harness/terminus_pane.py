"""The terminal the `terminus` harness types into, inside the env's own sandbox.

Harbor's Terminus-2 drives a tmux pane: it sends keystrokes with `tmux send-keys`, waits the
duration the model asked for, and reads the pane's new output. skyhub's sandbox images (the
default image, and the Debian images Harbor tasks build on) have no tmux, and a harness may act
only through the env's turns, so the same terminal is made from what every Debian image has:
`pane.sh` (below) keeps an interactive `bash --login` on a pseudo-terminal (util-linux `script`,
as skyhub's own shells do) whose input is a FIFO and whose output is appended to a log. Each
model turn is one `bash` turn of the env that runs

    bash /tmp/.terminus-XXXX/pane.sh CAP COLS ROWS  0.1 $'ls -la\\n'  1 $'make\\n'

which writes each command's keystrokes into the FIFO, sleeps its duration, then prints what
the terminal printed since the last turn (carriage-return overwrites applied, as a screen
shows them; the middle cut out beyond CAP bytes), or, when nothing new came, its last ROWS
lines. Keystrokes are sent byte for byte, so a command keeps running past its duration (the
next turn shows its later output), Ctrl-C reaches the foreground job, and interactive programs
(a Python REPL, `cat`) read what is typed, as in a tmux pane. What differs from tmux: there is
no screen emulation (full-screen programs such as vim print their escape sequences, which the
env strips, rather than a screen), and an `exit` of the pane's shell starts a new one at the
next turn (Terminus-2 would stop).

The first turn's action installs `pane.sh` (a heredoc) in a directory of its own under /tmp,
named per episode; later turns only call it. If it went missing (the agent deleted it), the
turn says so and the next action installs it again.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from skyhub.shell import protocol

PANE_SH = r"""# skyhub terminus: the agent's terminal, a login bash on a pseudo-terminal; keystrokes
# go in through a FIFO, its output is appended to a log.
# usage: pane.sh CAP COLS ROWS [SECONDS KEYS]...
t=${0%/*}; cap=$1; cols=$2; rows=$3; shift 3
pid=$(cat "$t/pid" 2>/dev/null)
if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null || [ ! -p "$t/in" ]; then
  [ -n "$pid" ] && printf '\n[the terminal'"'"'s shell ended; a new one was started]\n' >> "$t/log"
  rm -f "$t/in" "$t/pid"; touch "$t/log"; mkfifo "$t/in" || exit 3
  # setsid -f, not `&`: a background job of a shell without job control ignores SIGINT, and
  # so would every program in the terminal (Ctrl-C would do nothing)
  if command -v script >/dev/null 2>&1; then
    TERM=vt100 setsid -f script -qfec \
      "echo \$\$ > '$t/pid'; stty cols $cols rows $rows 2>/dev/null; exec bash --login -i" \
      /dev/null <>"$t/in" >>"$t/log" 2>&1
  else
    printf '[no `script` in this image: the terminal is a pipe (no echo, no Ctrl-C)]\n' >> "$t/log"
    setsid -f sh -c "echo \$\$ > '$t/pid'; exec bash --login -i" <>"$t/in" >>"$t/log" 2>&1
  fi
  for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    [ -s "$t/pid" ] && break; sleep 0.1
  done
fi
while [ $# -ge 2 ]; do
  [ -n "$2" ] && printf '%s' "$2" 1<>"$t/in"
  sleep "$1"; shift 2
done
off=$(cat "$t/off" 2>/dev/null); size=$(wc -c < "$t/log")
echo "$size" > "$t/off"
clean() { LC_ALL=C sed -e 's/\r*$//' -e 's/.*\r//'; }
echo '@@terminus@@'
if [ "$size" -gt "${off:-0}" ]; then
  echo 'New Terminal Output:'
  tail -c +$((${off:-0} + 1)) "$t/log" | head -c $((size - ${off:-0})) | clean > "$t/out"
else
  echo 'Current Terminal Screen:'
  tail -n "$rows" "$t/log" | clean > "$t/out"
fi
n=$(wc -c < "$t/out")
if [ "$n" -le "$cap" ]; then
  cat "$t/out"
else
  half=$((cap / 2))
  head -c "$half" "$t/out"
  printf '\n[... output cut to %d bytes: %d bytes in the middle are not shown ...]\n' \
    "$cap" $((n - 2 * half))
  tail -c "$half" "$t/out"
fi
"""
_MARKER = "@@terminus@@\n"

#: tmux key names (the whole keystrokes string, as `tmux send-keys` reads one argument) and
#: the bytes a terminal sends for them
_NAMED = {"enter": "\r", "kpenter": "\r", "escape": "\x1b", "esc": "\x1b", "tab": "\t",
          "btab": "\x1b[Z", "bspace": "\x7f", "space": " ", "up": "\x1b[A", "down": "\x1b[B",
          "right": "\x1b[C", "left": "\x1b[D", "home": "\x1b[H", "end": "\x1b[F",
          "ic": "\x1b[2~", "dc": "\x1b[3~", "ppage": "\x1b[5~", "pageup": "\x1b[5~",
          "pgup": "\x1b[5~", "npage": "\x1b[6~", "pagedown": "\x1b[6~", "pgdn": "\x1b[6~",
          "f1": "\x1bOP", "f2": "\x1bOQ", "f3": "\x1bOR", "f4": "\x1bOS"}
_KEY = re.compile(r"((?:[CcMmSs]-|\^)*)([^\n]+)")


def key_bytes(keystrokes: str) -> str:
    """What typing `keystrokes` sends: a tmux key name given alone (`C-c`, `^D`, `M-b`,
    `Escape`, `Up`, ...) becomes its bytes; anything else is sent literally, as tmux does with
    a string that names no key. NUL (`C-@`, `C-Space`) cannot be sent and is dropped."""
    m = _KEY.fullmatch(keystrokes)
    if m is None:
        return keystrokes
    mods, base = m.group(1).lower(), m.group(2)
    if base.lower() in _NAMED:
        key = _NAMED[base.lower()]
    elif len(base) == 1 and mods:
        key = base
        if "c-" in mods or "^" in mods:
            if base.isalpha() or base in "@[\\]^_":
                key = chr(ord(base.upper()) & 0x1F)
            elif base == "?":
                key = "\x7f"
            elif base in " 2":
                key = ""
            else:
                return keystrokes
    else:
        return keystrokes
    return "\x1b" + key if "m-" in mods else key


def bash_quote(text: str) -> str:
    """`text` as one bash word, exactly (ANSI-C quoting: `$'ls -la\\n'`), readable in the
    episode's record; NUL cannot be in a word and is dropped."""
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch])
        elif ch == "\0":
            continue
        elif ord(ch) < 0x20 or ord(ch) == 0x7f:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


@dataclass(frozen=True)
class Command:
    """Keystrokes to send, then how many seconds to wait."""

    keystrokes: str
    duration: float


class Pane:
    """The terminal of one episode: `action(commands)` is the env action of a turn,
    `read(observation)` what the terminal printed, from the env's answer to it.

    Args:
        max_output: bytes of terminal output shown per turn (the middle is cut out beyond).
        cols, rows: the terminal's size (`stty`); `rows` lines are shown when nothing new
            was printed.
        max_wait: seconds one turn may wait in all (the env's per-command time limit, less
            a margin): a turn's durations are cut to fit, and `read` says so.
    """

    def __init__(self, *, max_output: int = 10000, cols: int = 160, rows: int = 40,
                 max_wait: float = 55.0) -> None:
        self.max_output, self.cols, self.rows = max_output, cols, rows
        self.max_wait = max(max_wait, 0.5)
        self.dir = f"/tmp/.terminus-{secrets.token_hex(4)}"
        self._installed = False
        self._cut: tuple[float, float] | None = None  # (asked, waited) of the last turn

    def action(self, commands: list[Command], *, done: bool = False) -> str:
        """The env action that types `commands` and shows the output; with `done`, the
        env's ending action after them (`<done/>` alone when there are none)."""
        if done and not commands:
            return "<done/>"
        script = self.script(commands)
        action = protocol.tool_action("bash", {"command": script})
        if done:
            action += ('<tool_call>{"name": "done", "arguments": {}}</tool_call>'
                       if action.startswith("<tool_call>") else "<done/>")
        return action

    def script(self, commands: list[Command]) -> str:
        """The bash command of a turn (the helper installed first where it is not yet)."""
        left, asked, words = self.max_wait, 0.0, []
        for c in commands:
            wait = min(max(c.duration, 0.0), left)
            left -= wait
            asked += max(c.duration, 0.0)
            words += [f"{wait:g}", bash_quote(key_bytes(c.keystrokes))]
        self._cut = (asked, self.max_wait - left) if asked > self.max_wait - left + 1e-9 else None
        call = " ".join(["bash", f"{self.dir}/pane.sh", str(self.max_output), str(self.cols),
                         str(self.rows), *words])
        if self._installed:
            return call
        self._installed = True
        return (f"mkdir -p {self.dir} && cat > {self.dir}/pane.sh <<'TERMINUS_PANE'\n{PANE_SH}"
                f"TERMINUS_PANE\n{call}")

    def read(self, observation: str) -> str:
        """The terminal's output in the env's answer to `action` ("New Terminal Output:"
        or "Current Terminal Screen:", then the text). When the helper did not answer (it
        was deleted, or the env cut the turn short), the env's answer itself, and the next
        action installs the helper again."""
        at = observation.find(_MARKER)
        if at < 0:
            self._installed = False
            return ("[the terminal did not answer; it is restored at the next turn]\n"
                    + observation)
        text = observation[at + len(_MARKER):]
        end = text.rfind("\n</output>")
        text = text[:end] if end >= 0 else text
        if self._cut is not None:
            asked, waited = self._cut
            text += (f"\n[waited {waited:g} s of the {asked:g} s asked: a turn waits at most "
                     f"{self.max_wait:g} s in all]")
        return text


__all__ = ["PANE_SH", "Command", "Pane", "bash_quote", "key_bytes"]
