"""`skyhub check`'s `tools` check: an env's declared tools are valid and callable.

An env that declares `tools` (OpenAI function schemas) promises three things a harness relies
on, checked here:
- each schema is what OpenAI-compatible servers and chat templates take: `{"type":
  "function", "function": {"name", "description", "parameters"}}`, a name of letters, digits,
  `_` and `-` (at most 64), unique, and `parameters` a JSON schema of an object (valid under
  JSON Schema Draft 2020-12 where `jsonschema` is installed);
- each tool is callable: after a reset, one well-formed call (its arguments made from its
  schema: `sample_arguments`) is answered in `info["tool_results"]` by its call id; so is a
  turn of malformed calls (an unknown tool, bad JSON, a non-object, a schema violation), each
  marked an error, without an exception;
- `reference_tool_calls()`, where the env has it, scores what `reference_action()` scores on
  the same seeds (the tool oracle is the text oracle in another format).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from skyhub.errors import CheckFailed
from skyhub.tools import ToolCall, check_call

#: OpenAI's rule for a function's name.
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

#: Steps after which a reference episode is given up (as checks.MAX_STEPS).
MAX_STEPS = 50


def sample_arguments(schema: dict[str, Any]) -> Any:
    """A value that fits `schema` (the JSON-schema subset tool parameters use): its `const`,
    `default`, first `enum` value or first example where given, else a plain value of its
    type; an object gets its required properties."""
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][0]
    if isinstance(schema.get("examples"), list) and schema["examples"]:
        return schema["examples"][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return sample_arguments(schema[key][0])
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: sample_arguments(props.get(name) or {})
                for name in schema.get("required", [])}
    if kind == "array":
        items = schema.get("items")
        return [sample_arguments(items)] if isinstance(items, dict) else []
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        value = max(1, int(low) + 1)
        return value if kind == "integer" else float(value)
    return {"boolean": True, "null": None}.get(kind, "x")


def schema_problems(tools: Any) -> tuple[list[str], list[str]]:
    """What is wrong with each declared tool (its OpenAI shape, its JSON schema), and notes."""
    problems: list[str] = []
    notes: list[str] = []
    if not isinstance(tools, list | tuple):
        return [f"env.tools is {type(tools).__name__}: declare a list of OpenAI function "
                "schemas (skyhub.tools.function_tool builds one)"], notes
    validator: Any = None
    try:
        from jsonschema import Draft202012Validator as validator
        from jsonschema.exceptions import SchemaError
    except ImportError:
        notes.append("jsonschema is not installed: the parameters' JSON schemas were checked "
                     "for their OpenAI shape only (pip install jsonschema)")
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or \
                not isinstance(fn, dict):
            problems.append(f"{where} is not {{\"type\": \"function\", \"function\": {{...}}}}")
            continue
        name = fn.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            problems.append(f"{where}: name {name!r:.70} is not 1-64 letters, digits, _ or -")
        elif name in seen:
            problems.append(f"{where}: the name {name!r} is declared twice")
        else:
            seen.add(name)
            where = f"tool {name!r}"
        if "description" in fn and not isinstance(fn["description"], str):
            problems.append(f"{where}: description is not a string")
        elif not fn.get("description"):
            notes.append(f"{where} has no description: models call tools by what it says")
        params = fn.get("parameters")
        if params is None:
            continue  # OpenAI: no parameters is a function without arguments
        if not isinstance(params, dict) or params.get("type") != "object":
            problems.append(f"{where}: parameters must be a JSON schema with \"type\": "
                            "\"object\"")
            continue
        if validator is not None:
            try:
                validator.check_schema(params)
            except SchemaError as e:
                path = "/".join(str(p) for p in e.path) or "(top)"
                problems.append(f"{where}: parameters are not a valid JSON schema at {path}: "
                                f"{e.message[:200]}")
    return problems, notes


def _malformed_calls(tools: list[dict[str, Any]]) -> list[ToolCall]:
    name = tools[0]["function"]["name"]
    params = tools[0]["function"].get("parameters") or {}
    required = params.get("required") or []
    violation: dict[str, Any] = {"\x00unknown": 1} if not required else {}
    calls = [ToolCall("check_unknown", "no_such_tool_" + name, {}),
             ToolCall("check_bad_json", name, '{"unclosed": '),
             ToolCall("check_not_object", name, "[1, 2, 3]")]
    if required or params.get("additionalProperties") is False:
        calls.append(ToolCall("check_schema", name, violation))
    return calls


def _results(info: Any, calls: list[ToolCall], what: str) -> list[dict[str, Any]]:
    """The step's `tool_results`, checked: one per call, by id, in order, with text content."""
    results = info.get("tool_results") if isinstance(info, dict) else None
    if not isinstance(results, list):
        raise CheckFailed(f"{what}: info has no 'tool_results' list (play calls with "
                          "skyhub.tools.play_tool_turn, or return one result per call)")
    ids = [r.get("call_id") if isinstance(r, dict) else None for r in results]
    if ids != [c.id for c in calls]:
        raise CheckFailed(f"{what}: tool_results answer call ids {ids}, not "
                          f"{[c.id for c in calls]} (one result per call, in call order)")
    for r in results:
        if not isinstance(r.get("content"), str) or r.get("name") != \
                next(c.name for c in calls if c.id == r["call_id"]):
            raise CheckFailed(f"{what}: result {r['call_id']!r} lacks the call's name or a "
                              "text content")
    return results


def _step(env: Any, action: Any, what: str, describe: Callable[[BaseException], str]) -> Any:
    try:
        return env.step(action)
    except Exception as e:
        raise CheckFailed(f"{what} raised {describe(e)}: a tool call must be answered in its "
                          "result, never raised") from None


def _play_reference(env: Any, seed: int, policy: Callable[[], Any]) -> tuple[float, Any, int]:
    """Reset with `seed`, play `policy()` to the end: (total reward, outcome, steps)."""
    env.reset(seed=seed)
    total, info = 0.0, {}
    for n in range(1, MAX_STEPS + 1):
        action = policy()
        if action is None:
            raise CheckFailed(f"the reference returned None before the episode of seed {seed} "
                              "ended")
        _, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        if terminated or truncated:
            return total, info.get("outcome") if isinstance(info, dict) else None, n
    return total, "did not end", MAX_STEPS


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:300]


def check_tools(env: Any, seed: int, episodes: int, notes: list[str], *,
                describe: Callable[[BaseException], str] = _short) -> str:
    """The `tools` check (module docstring); "no tools" (a pass) for an env without any.
    `describe` words an exception (`skyhub.eval.checks` passes its own, with the frame)."""
    tools = getattr(env, "tools", None)
    if tools is None:
        tools = getattr(env.unwrapped, "tools", None)
    if not tools:
        return "no tools: the env takes text actions only"
    problems, more = schema_problems(tools)
    notes += more
    if problems:
        raise CheckFailed("; ".join(problems[:6]))
    names = [t["function"]["name"] for t in tools]
    for name in names:
        fn = next(t["function"] for t in tools if t["function"]["name"] == name)
        args = sample_arguments(fn.get("parameters") or {"type": "object"})
        call = ToolCall(f"check_{name}", name, args)
        if check_call(call, tools)[1] is not None:
            notes.append(f"tool {name!r}: the arguments made from its schema ({args}) do not "
                         f"fit it by skyhub's check ({check_call(call, tools)[1]}); not called")
            continue
        env.reset(seed=seed)
        info = _step(env, [call], f"a call of {name!r} with {args}", describe)[4]
        (result,) = _results(info, [call], f"a call of {name!r}")
        if result.get("error"):
            notes.append(f"tool {name!r}: a well-formed call ({args}) was answered as an error: "
                         f"{result['content'][:120]}")
    env.reset(seed=seed)
    bad = _malformed_calls(tools)
    info = _step(env, bad, "a turn of malformed calls", describe)[4]
    results = _results(info, bad, "a turn of malformed calls")
    unmarked = [r["call_id"] for r in results if not r.get("error")]
    if unmarked:
        raise CheckFailed(f"malformed calls {unmarked} were answered without error=True: "
                          "a malformed call's result must say what to fix")
    message = (f"{len(names)} tool schema(s) valid ({', '.join(names)}); each called once, "
               f"{len(bad)} malformed calls answered by call id")
    return message + _check_reference_calls(env, seed, episodes, notes)


def _check_reference_calls(env: Any, seed: int, episodes: int, notes: list[str]) -> str:
    unwrapped = env.unwrapped
    env.reset(seed=seed)
    if unwrapped.reference_tool_calls() is None:
        notes.append("reference_tool_calls() is None: the tool oracle was not checked")
        return ""
    seeds = range(seed, seed + max(1, min(episodes, 3)))
    for s in seeds:
        tools_play = _play_reference(env, s, unwrapped.reference_tool_calls)
        text = None
        env.reset(seed=s)
        if unwrapped.reference_action() is not None:
            text = _play_reference(env, s, unwrapped.reference_action)
        if text is None:
            if tools_play[0] <= 0 or tools_play[1] != "success":
                raise CheckFailed(f"reference_tool_calls() after reset(seed={s}) scored "
                                  f"{tools_play[0]:g} ({tools_play[1]!r}); expected > 0 and "
                                  "'success'")
        elif tools_play[:2] != text[:2]:
            raise CheckFailed(f"reference_tool_calls() after reset(seed={s}) scored "
                              f"{tools_play[0]:g} ({tools_play[1]!r}) in {tools_play[2]} steps, "
                              f"reference_action() {text[0]:g} ({text[1]!r}) in {text[2]}: the "
                              "tool and text oracles must get the same verdict")
    return f"; reference_tool_calls() scored as reference_action() on {len(seeds)} seed(s)"


__all__ = ["check_tools", "sample_arguments", "schema_problems"]
