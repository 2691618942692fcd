"""Shell episodes: what the shell families (`terminal`, `harbor`) share.

- `session.ShellSession`: one persistent interactive bash in a sandbox, command by command;
- `protocol`: what the agent sends (`<bash>` blocks, `<done/>`, or the same as tool calls);
- `judge`: the verifier run out of the agent's reach, and who broke a sandbox;
- `env.ShellEnv`: the episode flow (turns, time limits, the verifier at the end), which a
  family subclasses with its tasks.

Core, so that families need not import each other: `skyhub.envs.terminal` and
`skyhub.envs.harbor` both build on it. Nothing is imported here (`import skyhub.shell` is
free): import the module you need.
"""
