"""skyhub's PPO/GRPO trainer (extra `train`).

Not imported by `import skyhub`. The trainer arrives with its own issue; this package exists so
that the distribution's layout (hub/, envs/, trainer/) is in place from the start.
"""
