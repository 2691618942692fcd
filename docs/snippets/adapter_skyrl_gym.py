"""skyrl-gym: a skyhub env in skyrl-gym's registry, stepped the way SkyRL's generator does
(make with env_config and the dataset row's extras, init with the prompt, step with text)."""
import re

import skyrl_gym

from skyhub.adapters.skyrl_gym import dataset_rows, register

env_class = register("toy-lookup")                   # "skyhub-toy-lookup": the dataset's env_class
row = dataset_rows("toy-lookup", n=1)[0]             # prompt, env_class, reward_spec, extra_info
env = skyrl_gym.make(env_class, env_config={}, extras={"extra_info": row["extra_info"]})
chat, _ = env.init(row["prompt"])                    # [system prompt, question]
key = chat[-1]["content"].split()[-1].rstrip("?")
out = env.step(f"<lookup>{key}</lookup>")            # observations: [{"role": "user", ...}]
value = re.search(r"<result>(.*?)</result>", out["observations"][0]["content"]).group(1)
out = env.step(f"<answer>{value}</answer>")
print(out["reward"], out["done"], env.get_metrics())
env.close()
