"""`skyhub eval`'s harness: episodes/s against a model server, and its own overhead.

    python -m benchmarks.eval_harness [--episodes 160] [--latency 0.1] [--concurrency 16]

1. A model behind an OpenAI-compatible HTTP server that takes `latency` seconds per reply
   (the scripted test server on localhost; a real model's latency, no GPU needed), on
   `toy-lookup` (two model calls per episode). Ours: `evaluate.run` with `--concurrency`
   episodes in flight. Baseline: the loop most people write first, one episode after the
   other (`env.reset`, then `agent.act`/`env.step` until done), with the same agent.
   Goal: >= 0.8 x concurrency faster (16 in flight: >= 12.8x).
2. Overhead with an agent that costs nothing (the oracle) on toy-lookup: microseconds the
   harness adds per episode (recording, files, the vector env) over the plain loop. Goal:
   < 500 us per episode.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import result, write

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "support"))


def lookup_reply(messages: list[dict]) -> str:
    """toy-lookup's optimal policy: look the key up, then answer with the result."""
    import re

    last = messages[-1]["content"]
    found = re.search(r"<result>(.*?)</result>", last)
    if found:
        return f"<answer>{found.group(1)}</answer>"
    key = re.search(r"key (k\d+)", last).group(1)
    return f"<lookup>{key}</lookup>"


def plain_loop(env_id: str, agent, n: int) -> float:
    """Seconds for n episodes, one after the other: what the harness is measured against."""
    import skyhub

    with skyhub.make(env_id) as env:
        t0 = time.perf_counter()
        for k in range(n):
            obs, _ = env.reset(seed=k, options={"task_id": env.tasks[k % len(env.tasks)].id})
            messages = [{"role": "system", "content": env.system_prompt},
                        {"role": "user", "content": obs}]
            done = False
            while not done:
                reply = agent.act(messages, env.reference_action)
                action = reply if isinstance(reply, str) else reply.text
                obs, _, term, trunc, _ = env.step(action)
                messages += [{"role": "assistant", "content": action},
                             {"role": "user", "content": obs}]
                done = term or trunc
        return time.perf_counter() - t0


def harness(env_id: str, agent, n: int, concurrency: int) -> tuple[float, float]:
    """(seconds, accuracy) of `evaluate.run`, episodes written to a run directory."""
    from skyhub.eval import harness as evaluate

    with tempfile.TemporaryDirectory() as out:
        summary, _ = evaluate.run(env_id, agent, n=n, concurrency=concurrency, out=out)
    # the summary's seconds start once the envs exist, as the plain loop's timer does
    return summary.seconds, summary.accuracy


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=160)
    ap.add_argument("--latency", type=float, default=0.1, help="seconds per model reply")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--overhead-episodes", type=int, default=3000)
    args = ap.parse_args(argv)
    from openai_server import ScriptedOpenAIServer

    from skyhub.eval.agents import OracleAgent, load_agent

    with ScriptedOpenAIServer(lookup_reply, delay_s=args.latency) as server:
        agent = load_agent("openai:scripted", base_url=server.base_url)
        serial_n = max(8, args.episodes // args.concurrency)  # the baseline is slow: fewer
        serial_s = plain_loop("toy-lookup", agent, serial_n)
        ours_s, accuracy = harness("toy-lookup", agent, args.episodes, args.concurrency)
    if accuracy != 1.0:
        raise SystemExit(f"the scripted model should solve every episode (accuracy {accuracy})")
    ours_eps, serial_eps = args.episodes / ours_s, serial_n / serial_s
    goal = 0.8 * args.concurrency

    oracle = OracleAgent()
    n = args.overhead_episodes
    plain_loop("toy-lookup", oracle, 200)  # warm-up: imports, data
    plain_s = plain_loop("toy-lookup", oracle, n)
    ours_oracle_s, _ = harness("toy-lookup", oracle, n, 1)
    overhead_us = (ours_oracle_s - plain_s) / n * 1e6
    write("eval_harness", [
        result("episodes/s, model server", ours_eps, "one episode at a time", serial_eps,
               f">= {goal:g}x", met=ours_eps / serial_eps >= goal, unit="episodes/s",
               note=f"toy-lookup, {args.latency * 1e3:.0f} ms per reply, "
                    f"concurrency {args.concurrency}, {args.episodes} episodes"),
        result("overhead per episode, free agent", overhead_us, "plain loop (oracle)",
               plain_s / n * 1e6, "< 500 us", ratio=None, met=overhead_us < 500, unit="us",
               note=f"{n} episodes; plain loop {plain_s / n * 1e6:.0f} us per episode"),
    ])


if __name__ == "__main__":
    main()
