"""Long-horizon terminal tasks: a relay of 20 to 50 commands, each named by the last one's
output (`terminal-relay`, or `skyhub.make("terminal-synth", synth="relay")`).

The task says to run `./mark WORD` in /work. Each run that names the expected word records it
and prints the next command (`next: ./mark WORD`); a wrong word records nothing and prints the
expected one. The relay is finished when every word of the plan is recorded. The score is the
fraction recorded (`SKYHUB_SCORE=k/n` from the verifier, which checks that what is recorded is
the start of the plan, against its own copy of the plan), so an episode cut short still says
how far it got. Reading the plan (`/work/.relay/plan`) and running the whole relay in one
command is allowed: the verifier scores the state, not the route. It exists to exercise what
long episodes need: many
turns, a context smaller than the episode, a harness that summarises, step-wise training. A
policy that copies the word its last observation names solves it, so a tiny model can learn
it on a CPU.

Determinism as in `synth`: task i of a seed comes from `random.Random(f"relay:{seed}:{i}")`.
"""

from __future__ import annotations

import random

from skyhub.errors import UsageError
from skyhub.task import Task

from .synth import SOURCE, TIMEOUT_S, WORDS, _heredoc

MARK = """\
#!/bin/bash
# ./mark WORD: record WORD if it is the relay's next word, and say which command comes next
plan=/work/.relay/plan
log=/work/.relay/done
n=$(wc -l < "$plan")
k=$(wc -l < "$log")
if [ "$k" -ge "$n" ]; then echo "the relay is finished: $n of $n"; exit 0; fi
want=$(sed -n "$((k + 1))p" "$plan")
if [ "${1:-}" != "$want" ]; then echo "wrong word. next: ./mark $want"; exit 1; fi
echo "$want" >> "$log"
k=$((k + 1))
if [ "$k" -ge "$n" ]; then echo "ok $k of $n. the relay is finished"; exit 0; fi
echo "ok $k of $n. next: ./mark $(sed -n "$((k + 1))p" "$plan")"
"""

# The verifier holds its own copy of the plan (never the sandbox's, which the agent may edit).
VERIFY = """\
#!/bin/bash
plan=$(mktemp)
trap 'rm -f "$plan"' EXIT
cat > "$plan" {plan}n=$(wc -l < "$plan")
log=/work/.relay/done
[ -f "$log" ] && [ ! -L "$log" ] || {{ echo "no record"; echo "SKYHUB_SCORE=0/$n"; exit 0; }}
k=$(wc -l < "$log")
if [ "$k" -gt "$n" ] || ! head -n "$k" "$plan" | cmp -s - "$log"; then
  echo "the record is not the start of the plan"; echo "SKYHUB_SCORE=0/$n"; exit 0
fi
echo "SKYHUB_SCORE=$k/$n"
"""


def make_task(seed: int, i: int, *, steps: int | None = None, n_words: int = 6) -> Task:
    """Relay task `i` of `seed`: `steps` words (None: 20 to 50, seeded) drawn from the first
    `n_words` of `synth.WORDS`, no word twice in a row."""
    if not 2 <= n_words <= len(WORDS):
        raise UsageError(f"n_words must be 2..{len(WORDS)}, got {n_words}")
    rng = random.Random(f"relay:{seed}:{i}")
    n = steps if steps is not None else rng.randint(20, 50)
    if n < 1:
        raise UsageError(f"steps must be >= 1, got {n}")
    pool, plan = WORDS[:n_words], []
    for _ in range(n):
        plan.append(rng.choice([w for w in pool if not plan or w != plan[-1]]))
    plan_text = "".join(f"{w}\n" for w in plan)
    setup = (f"mkdir -p /work/.relay\ncat > /work/.relay/plan {_heredoc(plan_text)}"
             f": > /work/.relay/done\ncat > /work/mark {_heredoc(MARK)}chmod +x /work/mark\n")
    prompt = (f"A relay of {n} steps. In /work, run `./mark {plan[0]}`. Each run prints the "
              "next command to run; run them one after another until the relay is finished.")
    return Task(id=f"relay-{seed}-{i}-{n}", prompt=prompt,
                answer='while read -r w; do ./mark "$w"; done < /work/.relay/plan\n',
                meta={"setup": "set -eu\ncd /work\n" + setup,
                      "verify": VERIFY.format(plan=_heredoc(plan_text)),
                      "scored": True, "family": "relay", "steps": n, "plan": plan,
                      "timeout_s": TIMEOUT_S, "source": SOURCE, "seed": seed})


def generate(seed: int, n: int, *, steps: int | None = None, n_words: int = 6) -> list[Task]:
    if n < 0:
        raise UsageError(f"n must be >= 0, got {n}")
    return [make_task(seed, i, steps=steps, n_words=n_words) for i in range(n)]


__all__ = ["generate", "make_task"]
