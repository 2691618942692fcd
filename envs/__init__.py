"""skyhub's built-in env families.

Each family is one directory (a "room"): env, tasks, protocol, reward, data. A family's
`__init__` registers its ids with string entry points and imports nothing heavy; it is loaded
through the `skyhub.envs` entry point declared in pyproject.toml, like any third-party plugin.
"""
