"""OpenEnv: serve a skyhub env over OpenEnv's protocol; OpenEnv's own client plays it.
(From a shell: `python -c "from skyhub.adapters.openenv import serve; serve('toy-lookup')"`.)"""
import re

from skyhub.adapters.openenv import OpenEnvServer, SkyhubEnvClient

with OpenEnvServer("toy-lookup") as server, SkyhubEnvClient(base_url=server.url).sync() as env:
    result = env.reset(seed=0)                       # messages: the system prompt + the question
    key = result.observation.text.split()[-1].rstrip("?")
    result = env.step(f"<lookup>{key}</lookup>")     # "<result>quartz</result> (2 turns left)"
    value = re.search(r"<result>(.*?)</result>", result.observation.text).group(1)
    result = env.step(f"<answer>{value}</answer>")
    print(result.reward, result.done, result.observation.outcome, result.observation.infra_error)
