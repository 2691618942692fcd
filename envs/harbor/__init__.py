"""Harbor tasks (Terminal-Bench's successor format) as step-by-step envs, in Docker.

    env = skyhub.make("harbor", data_dir="path/to/task-or-dataset")
    env = skyhub.make("harbor-examples")             # bundled tasks, offline

Registration only: docker is imported when an env is made.
"""

from pathlib import Path

from skyhub.registry import register

register("harbor", "skyhub.envs.harbor.env:HarborEnv",
         description="A Harbor task or dataset directory: build, run step by step in a bash "
                     "session, then tests/test.sh writes the reward.",
         tags=("harbor", "terminal", "shell", "multi-turn", "tool-use", "docker"))
register("harbor-examples", "skyhub.envs.harbor.env:HarborEnv",
         kwargs={"data_dir": str(Path(__file__).parent / "data" / "examples")},
         description="Bundled Harbor-format tasks built FROM debian:bookworm-slim (offline).",
         tags=("harbor", "terminal", "shell", "multi-turn", "tool-use", "docker", "offline"))
