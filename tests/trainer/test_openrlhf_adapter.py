"""The OpenRLHF agent adapter (trainer/openrlhf.py) on real skyhub envs, without openrlhf.

openrlhf cannot be installed or imported on the CPU machines (flash-attn, deepspeed), so these
tests drive `AgentInstance.reset/step` the way OpenRLHF's `MultiTurnAgentExecutor` does. The
last test runs the real OpenRLHF loop (its `openrlhf/utils/agent.py`) where openrlhf is
installed, and skips elsewhere.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import skyhub
from skyhub.errors import InfraError, UsageError
from skyhub.trainer import openrlhf as adapter

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """A real HF fast tokenizer (word-level, no weights needed) with a ChatML template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]", eos_token="<|im_end|>",
                                  additional_special_tokens=["<|im_start|>"])
    tok.chat_template = CHATML
    return tok


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def play(label: str, actions: list[str], **instance_kwargs: Any) -> tuple[Any, list[dict]]:
    """One episode as OpenRLHF runs it: reset with prompt+label, then step until done."""
    async def go() -> tuple[Any, list[dict]]:
        inst = adapter.AgentInstance(**instance_kwargs)
        await inst.reset({"observation": "PROMPT", "label": label})
        results = []
        for a in actions:
            results.append(await inst.step({"observation_text": "", "action_text": a,
                                            "label": label, "sampling_params": None}))
            if results[-1]["done"]:
                break
        return inst, results
    return run(go())


def lookup_task(task_id: str = "lookup-0-3") -> skyhub.Task:
    with skyhub.make("toy-lookup") as env:
        return env.tasks.get(task_id)


def test_multi_turn_episode_with_correct_actions_scores_1(tokenizer: Any) -> None:
    task = lookup_task()
    label = adapter.make_label("toy-lookup", task.id)
    params = types.SimpleNamespace(stop=None, include_stop_str_in_output=False)
    inst, res = play(label, [f"<lookup>{task.meta['key']}</lookup>",
                             f"<answer>{task.answer}</answer>"],
                     tokenizer=tokenizer, sampling_params=params)
    assert [r["done"] for r in res] == [False, True]
    assert [r["rewards"].item() for r in res] == [0.0, 1.0] and res[-1]["scores"] == 1.0
    # after the stop string `</lookup>` the assistant turn is still open: close it, add the
    # env's reply as a user turn, reopen the assistant turn
    assert res[0]["environment_feedback"] == (
        f"<|im_end|>\n<|im_start|>user\n<result>{task.answer}</result> (2 turns left)"
        "<|im_end|>\n<|im_start|>assistant\n")
    assert res[-1]["environment_feedback"] == ""
    assert res[-1]["extra_logs"] == {"skyhub_infra_error": 0.0, "skyhub_turns": 2.0,
                                     "skyhub_success": 1.0}
    assert params.stop == ["</lookup>", "</answer>"] and params.include_stop_str_in_output
    assert inst.env is None  # handed back to the pool when done


def test_feedback_does_not_repeat_an_end_token_the_model_generated(tokenizer: Any) -> None:
    fb = adapter.format_feedback("hello", tokenizer, turn_closed=True)
    assert fb == "\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    eos = tokenizer.eos_token_id
    assert adapter._turn_closed(tokenizer, [eos], "text")  # the token, not the text, decides
    assert not adapter._turn_closed(tokenizer, [0], "text<|im_end|>")
    assert adapter._turn_closed(tokenizer, [], "text<|im_end|>")  # text when no token known
    assert adapter.format_feedback("hi", None, turn_closed=False) == "\nhi\n"  # no template


def test_malformed_actions_get_feedback_not_exceptions() -> None:
    task = lookup_task()
    _, res = play(adapter.make_label("toy-lookup", task.id),
                  ["I don't know", "<lookup>", "<answer>nope</answer>"])
    assert [r["done"] for r in res] == [False, False, True]
    assert "No <lookup>KEY</lookup>" in res[0]["environment_feedback"]
    assert sum(r["rewards"].item() for r in res) == 0.0 and res[-1]["scores"] == 0.0
    assert res[-1]["extra_logs"]["skyhub_success"] == 0.0


def test_single_turn_env() -> None:
    with skyhub.make("toy-arith") as env:
        task = env.tasks[0]
    label = adapter.make_label("toy-arith", task.id)
    _, res = play(label, [f"Think. <answer>{task.answer}</answer>"])
    assert len(res) == 1 and res[0]["done"] and res[0]["rewards"].item() == 1.0
    _, res = play(label, ["no tags at all"])
    assert len(res) == 1 and res[0]["done"] and res[0]["rewards"].item() == 0.0


def test_envs_are_pooled_across_episodes() -> None:
    """OpenRLHF makes an instance per sample: the env behind it is reused, not rebuilt."""
    task = lookup_task()
    label = adapter.make_label("toy-lookup", task.id)

    async def episode() -> skyhub.TextEnv:
        inst = adapter.AgentInstance()
        await inst.reset({"observation": "", "label": label})
        env = inst.env
        await inst.step({"action_text": f"<answer>{task.answer}</answer>"})
        return env

    assert run(episode()) is run(episode())


def test_export_prompts_round_trips_task_ids(tmp_path: Path, tokenizer: Any) -> None:
    out = tmp_path / "p.jsonl"
    assert adapter.export_prompts("toy-lookup", out, {"max_turns": 4}, split="dev") == 100
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    with skyhub.make("toy-lookup", max_turns=4, split="dev") as env:
        assert [adapter.parse_label(r["label"])[2] for r in rows] == env.tasks.ids()
        obs, _ = env.reset(options={"task_id": env.tasks[5].id})
        task = env.tasks[5]
        assert rows[5]["prompt"] == [{"role": "system", "content": env.system_prompt},
                                     {"role": "user", "content": obs}]
    env_id, kwargs, _ = adapter.parse_label(rows[0]["label"])
    assert (env_id, kwargs, rows[0]["datasource"]) == (
        "toy-lookup", {"max_turns": 4, "split": "dev"}, "toy-lookup")
    # what OpenRLHF does with the row (--data.apply_chat_template), then a full episode
    prompt = tokenizer.apply_chat_template(rows[5]["prompt"], tokenize=False,
                                           add_generation_prompt=True)

    async def go() -> list[dict]:
        inst = adapter.AgentInstance(tokenizer=tokenizer)
        assert (await inst.reset({"observation": prompt, "label": rows[5]["label"]})) == {
            "observation": prompt}
        return [await inst.step({"action_text": a}) for a in (
            f"<lookup>{task.meta['key']}</lookup>", f"<answer>{task.answer}</answer>")]
    assert [r["rewards"].item() for r in run(go())] == [0.0, 1.0]
    assert adapter.export_prompts("toy-arith", out, limit=3) == 3


def test_plain_labels_use_the_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="SKYHUB_ENV"):
        adapter.parse_label("lookup-0-1")
    monkeypatch.setenv("SKYHUB_ENV", "toy-lookup")
    monkeypatch.setenv("SKYHUB_ENV_KWARGS", '{"max_turns": 5}')
    assert adapter.parse_label("lookup-0-1") == ("toy-lookup", {"max_turns": 5}, "lookup-0-1")
    label = adapter.make_label("toy-arith", "arith-0-0", {"max_turns": 2, "seed": 0})
    assert adapter.parse_label(label) == ("toy-arith", {"max_turns": 5, "seed": 0}, "arith-0-0")
    _, res = play("lookup-0-1", ["?"] * 5)
    assert len(res) == 5 and res[-1]["done"]  # max_turns=5 came from SKYHUB_ENV_KWARGS
    monkeypatch.setenv("SKYHUB_ENV_KWARGS", "[1]")
    with pytest.raises(UsageError, match="JSON object"):
        adapter.parse_label("lookup-0-1")


def test_unknown_task_raises_instead_of_dropping_the_episode() -> None:
    """Misconfiguration (a dataset from other env kwargs) must stop the run at once."""
    with pytest.raises(KeyError, match="no-such-task"):
        play(adapter.make_label("toy-lookup", "no-such-task"), [])


class FlakyEnv(skyhub.TextEnv):
    """Fails the way the `mode` says: raise InfraError on reset or step, or report
    `infra_error=True` in info (what a sandboxed env does when its container died)."""

    system_prompt = "say anything"

    def __init__(self, mode: str = "info") -> None:
        super().__init__()
        self.mode, self.tasks = mode, skyhub.TaskSet([skyhub.Task("t1", "hi", "x", {})])

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.start_episode(seed, options)
        if self.mode == "reset":
            raise InfraError("sandbox gone during reset")
        return "hi", self.make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        if self.mode == "raise":
            raise InfraError("sandbox gone")
        if self.mode == "bug":
            raise RuntimeError("unexpected")
        return "", 0.0, True, False, self.make_info("error", infra_error=True, error="oom")


@pytest.mark.parametrize("mode", ["info", "raise", "bug", "reset"])
def test_infra_errors_are_dropped_with_a_nan_score(tmp_env_id: str, mode: str) -> None:
    skyhub.register(tmp_env_id, FlakyEnv)
    _, res = play(adapter.make_label(tmp_env_id, "t1", {"mode": mode}), ["a", "b"])
    assert len(res) == 1 and res[0]["done"] and res[0]["environment_feedback"] == ""
    assert res[0]["rewards"].item() == 0.0  # finite: OpenRLHF trains on `rewards`
    assert math.isnan(res[0]["scores"])  # dynamic filtering drops the whole prompt group
    assert res[0]["extra_logs"]["skyhub_infra_error"] == 1.0
    key = json.dumps([tmp_env_id, {"mode": mode}], sort_keys=True)
    assert not adapter._POOL._idle.get(key)  # a failed env is closed, not reused


def test_importing_the_adapter_imports_neither_openrlhf_nor_torch() -> None:
    # (the classes themselves import openrlhf when first used, where it is installed)
    code = ("import sys, skyhub, skyhub.trainer.openrlhf as m\n"
            "bad = sorted(k for k in sys.modules if k.split('.')[0] in ('openrlhf', 'torch'))\n"
            "assert not bad, bad\n"
            "m.export_prompts('toy-arith', '/dev/null', limit=2)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "trainer/openrlhf.py" in subprocess.run(
        [sys.executable, "-m", "skyhub.trainer.openrlhf", "path"], capture_output=True,
        text=True, timeout=120).stdout


def test_executor_without_openrlhf_says_where_it_runs() -> None:
    if importlib.util.find_spec("openrlhf") is not None:
        pytest.skip("openrlhf is installed here")
    with pytest.raises(RuntimeError, match="not importable"):
        run(adapter.AgentExecutor().execute("p", "l", None, 10, None, None))


def test_real_openrlhf_multi_turn_loop(monkeypatch: pytest.MonkeyPatch, tokenizer: Any,
                                       tmp_env_id: str) -> None:
    """OpenRLHF's own MultiTurnAgentExecutor (loaded from the installed package by path, with
    its logging helper stubbed, as OpenRLHF's tests do) runs a toy-lookup episode through the
    adapter file loaded the way OpenRLHF loads `--train.agent_func_path`."""
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("openrlhf not installed (it needs a CUDA machine)")
    pytest.importorskip("aiohttp")
    pytest.importorskip("torch")
    import logging

    root = Path(next(iter(spec.submodule_search_locations)))
    for name in ("openrlhf", "openrlhf.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "openrlhf.utils.logging_utils",
                        types.SimpleNamespace(init_logger=logging.getLogger))
    s = importlib.util.spec_from_file_location("openrlhf.utils.agent", root / "utils/agent.py")
    agent = importlib.util.module_from_spec(s)
    s.loader.exec_module(agent)
    monkeypatch.setitem(sys.modules, "openrlhf.utils.agent", agent)
    s = importlib.util.spec_from_file_location("agent_module", adapter.__file__)
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    assert issubclass(mod.AgentExecutor, agent.AgentExecutorBase)

    task = lookup_task()
    turns = iter([f"<lookup>{task.meta['key']}</lookup>", f"<answer>{task.answer}</answer>"])

    class Engine:
        async def generate(self, token_ids: list[int], params: Any, **kw: Any) -> Any:
            text = next(turns)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            out = types.SimpleNamespace(token_ids=ids, text=text, finish_reason="stop",
                                        logprobs=None)
            return types.SimpleNamespace(outputs=[out])

    params = types.SimpleNamespace(max_tokens=None, logprobs=None, stop=None,
                                   include_stop_str_in_output=False)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": task.prompt}],
                                           tokenize=False, add_generation_prompt=True)
    out = run(mod.AgentExecutor().execute(prompt, adapter.make_label("toy-lookup", task.id),
                                          params, 4096, tokenizer, Engine()))
    assert out["reward"] == 1.0 and out["scores"] == 1.0 and len(out["action_ranges"]) == 2
    assert out["extra_logs"]["skyhub_success"] == 1.0
    assert params.stop is None  # the caller's params are copied, never mutated
    (_, end1), (start2, _) = out["action_ranges"]  # the env's reply, as a ChatML user turn
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") in out["observation_tokens"][end1:start2]

    skyhub.register(tmp_env_id, FlakyEnv)
    turns = iter(["x"])
    out = run(mod.AgentExecutor().execute(prompt, adapter.make_label(tmp_env_id, "t1"),
                                          params, 4096, tokenizer, Engine()))
    assert out["reward"] == 0.0 and math.isnan(out["scores"])
    assert out["extra_logs"]["skyhub_infra_error"] == 1.0
