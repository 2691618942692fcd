"""verifiers: evaluate a skyhub env with verifiers' own loader and client (the same as
`vf-eval skyhub.adapters.verifiers -a '{"env": "toy-lookup"}' -m $MODEL -b $OPENAI_BASE_URL`).
The model is any OpenAI-compatible endpoint: OPENAI_BASE_URL, OPENAI_API_KEY and MODEL."""
import os

import verifiers as vf
from openai import AsyncOpenAI

env = vf.load_environment("skyhub.adapters.verifiers", env="toy-lookup", num_examples=4)
client = vf.OpenAIChatCompletionsClient(AsyncOpenAI())    # reads OPENAI_BASE_URL / _API_KEY
results = env.evaluate_sync(client, model=os.environ.get("MODEL", "gpt-4.1-mini"))
for out in results["outputs"]:                           # error: set on infra-error rollouts
    print(out["reward"], out["metrics"]["infra_error"], out["error"])
