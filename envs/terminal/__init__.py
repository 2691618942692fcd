"""Terminal envs: a persistent bash session in a sandbox; verifier scripts decide.

    env = skyhub.make("terminal-synth", seed=0)      # generated tasks, endless and offline
    env = skyhub.make("terminal", data_dir="my-tasks/")   # a directory of task directories

Commands go in <bash>...</bash>; <done/> ends the episode and the task's verifier runs in the
same sandbox. Registration only: nothing is imported until an env is made.
"""

from skyhub.registry import register

register("terminal-synth", "skyhub.envs.terminal.env:TerminalEnv",
         kwargs={"synth": True},
         description="Generated shell tasks (text, files, permissions, archives, git, "
                     "processes); a verifier script decides. Endless, offline.",
         tags=("terminal", "shell", "multi-turn", "tool-use", "offline", "synthetic"))
register("terminal", "skyhub.envs.terminal.env:TerminalEnv",
         description="Shell tasks from a directory (instruction.md, setup.sh, verify.sh, "
                     "solution.sh); bundled examples by default.",
         tags=("terminal", "shell", "multi-turn", "tool-use", "offline"))
register("terminal-relay", "skyhub.envs.terminal.env:TerminalEnv",
         kwargs={"synth": "relay", "max_turns": 60},
         description="Long-horizon relays: 20 to 50 commands, each named by the last one's "
                     "output; scored by the fraction done. Endless, offline.",
         tags=("terminal", "shell", "multi-turn", "long-horizon", "offline", "synthetic"))
