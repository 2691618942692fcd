"""Software-engineering envs: repository tasks graded by their own tests (SWE-bench format),
and bug localization scored against the gold patch.

    env = skyhub.make("swe", data_dir="instances.jsonl", repos="repos/")

The repository is at /testbed in a sandbox; the agent has bash and a file editor; the
repository's tests (run out of the agent's reach) and the `swebench` package's grader decide
(`reward="resolved"`), or CodeScout's localization scores (`reward="localization"`).
The parts: SWE-bench-format instances (`instances`), the episode (`env`, `protocol`,
`editor`, `workspace`), `resolved` (`grading`), patches (`diffs`), localization scores
(`localization`), planted bugs (`mutations`) and swe-synth's task generator (`synth`).
Registration only: nothing is imported until an env is made.
"""

from skyhub.registry import register

register("swe", "skyhub.envs.swe.env:SWEEnv",
         description="SWE-bench-format repository tasks (a directory of instances and "
                     "repositories): bash and a file editor at /testbed; the repository's "
                     "tests, graded by the swebench package, decide.",
         tags=("swe", "coding", "shell", "multi-turn", "tool-use", "offline"))
register("swe-synth", "skyhub.envs.swe.env:SWEEnv", kwargs={"synth": True},
         description="Bugs planted in real Python projects (toolz, inflection, boltons), kept "
                     "when their own tests catch them; endless and offline once made "
                     "(skyhub swe data get swe-synth).",
         tags=("swe", "coding", "shell", "multi-turn", "tool-use", "offline", "synthetic"))
