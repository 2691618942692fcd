"""Python envs on Jupyter kernels: python-code and python-math.

    env = skyhub.make("python-code")                 # bundled tasks; data_dir=PATH for MBPP/...
    env = skyhub.make("python-math", backend="docker")

The agent runs cells with <python>...</python> in a real IPython kernel inside a sandbox and
ends with <answer>...</answer>. Registration only: jupyter_client is imported when an env is
made.
"""

from skyhub.registry import register

register("python-code", "skyhub.envs.python.code_env:CodeEnv",
         description="Write a program with a Python kernel; graded by unit tests in a fresh "
                     "sandbox.",
         tags=("python", "code", "multi-turn", "tool-use", "offline"))
register("python-math", "skyhub.envs.python.math_env:MathEnv",
         description="Solve math problems with a Python kernel; \\boxed{} or <answer> checked "
                     "by numeric and symbolic (sympy) equivalence.",
         tags=("python", "math", "multi-turn", "tool-use", "offline"))
