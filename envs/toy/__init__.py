"""Toy envs: small, fast, verifiable tasks with no dependencies.

They are the template for a new family (copy this directory: env.py holds one single-turn and
one multi-turn env, base.py what they share, tasks.py their task sets), the envs the core's
tests and the Quickstart demo run, and the simple tasks a tiny model can learn on a CPU.

- `toy-arith` (env.py): one question ("What is 17 + 25?"), answered in `<answer>...</answer>`.
- `toy-lookup` (env.py): the answer is only in the environment: the agent must
  `<lookup>key</lookup>`, read the `<result>`, then answer. The smallest genuinely multi-turn,
  tool-using task.
- `toy-recall` (recall.py, a training fixture, not a template): reply with one bare word: the
  one shown (`hops=1`), or the one a key maps to in a table only the env can read (`hops=2`:
  name the key, read, answer). What the trainer's tiny-cpu recipe and learning tests train a
  randomly initialised model on.
"""

from skyhub.registry import register

register("toy-arith", "skyhub.envs.toy.env:ArithEnv",
         description="Integer arithmetic in one turn; answer in <answer>.",
         tags=("toy", "single-turn", "offline"))
register("toy-lookup", "skyhub.envs.toy.env:LookupEnv",
         description="Look a key up in a hidden table with <lookup>, then <answer> its value.",
         tags=("toy", "multi-turn", "tool-use", "offline"))
register("toy-recall", "skyhub.envs.toy.recall:RecallEnv",
         description="Reply with one word: the one shown, or (hops=2) the one a key maps to.",
         tags=("toy", "single-turn", "multi-turn", "offline"))
