"""Native tool calls: `ToolCall`, `ToolResult`, tool schemas, and checking a call against them.

An env that declares `tools` (a list of OpenAI function schemas, `function_tool` builds one)
takes structured calls in `step` besides its text protocol::

    env.step(skyhub.ToolCall("call_1", "lookup", {"key": "k7"}))
    env.step([ToolCall("a", "execute_sql", {"query": q1}), ToolCall("b", "execute_sql", ...)])
    env.step(response.choices[0].message)       # an OpenAI assistant message (or its dict)

Each call's result comes back in `info["tool_results"]` (`[{"call_id", "name", "content"}]`,
in call order) for a harness to send as `role: "tool"` messages. A malformed call (an unknown
tool, arguments that are not a JSON object, a schema violation) is answered in its result with
what to fix, never raised. The rules of a tool turn: `play_tool_turn`.

Why a schema check of our own rather than `jsonschema`: tool schemas are small (an object of
typed properties), the check runs on every call of every rollout, and `import skyhub` stays
light; `skyhub check` validates the schemas themselves with `jsonschema` where installed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list, tuple), "object": (dict,), "null": (type(None),),
}


@dataclass(frozen=True)
class ToolCall:
    """One tool call: `id` (the call id a tool message answers; may be ""), the tool's `name`,
    and its `arguments`: a dict, or the JSON text of one as OpenAI's API carries it (parsed
    when the env runs the call: text that is not a JSON object becomes an error result)."""

    id: str
    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)

    @classmethod
    def from_openai(cls, call: Any, index: int = 0) -> ToolCall:
        """A call from what an OpenAI-compatible response carries: `{"id", "type":
        "function", "function": {"name", "arguments"}}`, the flat `{"id", "name",
        "arguments"}`, or the SDK's object with the same attributes. A call without an id
        gets `call_<index>`."""
        if isinstance(call, ToolCall):
            return call
        get = call.get if isinstance(call, dict) else (lambda k, d=None: getattr(call, k, d))
        fn = get("function") or call
        fget = fn.get if isinstance(fn, dict) else (lambda k, d=None: getattr(fn, k, d))
        args = fget("arguments")
        if args is None:
            args = {}
        elif not isinstance(args, (dict, str)):
            args = json.dumps(args, default=str) if isinstance(args, list) else str(args)
        return cls(id=str(get("id") or f"call_{index}"), name=str(fget("name") or ""),
                   arguments=args)

    def to_openai(self) -> dict[str, Any]:
        """The call as an assistant message's `tool_calls` entry (arguments as JSON text)."""
        args = self.arguments if isinstance(self.arguments, str) else \
            json.dumps(self.arguments, ensure_ascii=False)
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": args}}

    def parsed_arguments(self) -> dict[str, Any] | str:
        """The arguments as a dict, or a message saying why they are not a JSON object."""
        args = self.arguments
        if isinstance(args, dict):
            return args
        if not args.strip():
            return {}
        try:
            value = json.loads(args)
        except ValueError as e:
            return (f"the arguments of {self.name!r} are not valid JSON ({e.msg} at character "
                    f"{e.pos}): send a JSON object such as "
                    f"{{\"name\": \"value\"}}")
        if not isinstance(value, dict):
            return (f"the arguments of {self.name!r} must be a JSON object, not "
                    f"{type(value).__name__}: send {{\"parameter\": value, ...}}")
        return value


@dataclass(frozen=True)
class ToolResult:
    """What one call returned: its `call_id`, the tool's `name`, the `content` to show the
    agent, and `error` when the call was malformed or not run (the content says why)."""

    call_id: str
    name: str
    content: str
    error: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "name": self.name, "content": self.content,
                "error": self.error}

    @staticmethod
    def message(result: dict[str, Any]) -> dict[str, Any]:
        """A `tool_results` entry as the `role: "tool"` message chat APIs and templates take."""
        return {"role": "tool", "tool_call_id": result.get("call_id", ""),
                "name": result.get("name", ""), "content": result.get("content", "")}


def function_tool(name: str, description: str, properties: dict[str, dict[str, Any]],
                  required: list[str] | None = None) -> dict[str, Any]:
    """An OpenAI function schema: `properties` are JSON-schema properties (`{"query":
    {"type": "string", "description": ...}}`), all required unless `required` says."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties,
                       "required": list(properties) if required is None else list(required)}}}


def tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    return [t["function"]["name"] for t in tools or () if "function" in t]


def find_tool(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any] | None:
    """The `function` part of the schema named `name`, or None."""
    for t in tools or ():
        fn = t.get("function", {})
        if fn.get("name") == name:
            return fn
    return None


def check_value(schema: dict[str, Any], value: Any, where: str) -> str | None:
    """Why `value` does not fit `schema` (types, required and unknown properties, enums,
    array items), or None when it fits. Keywords beyond those are not checked."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if kinds:
        ok = any(isinstance(value, JSON_TYPES.get(k, object)) and
                 not (k in ("integer", "number") and isinstance(value, bool))
                 for k in kinds)
        if not ok and "integer" in kinds and isinstance(value, float) and value.is_integer():
            ok = True
        if not ok:
            return f"{where} must be {' or '.join(kinds)}, got {type(value).__name__} {value!r:.60}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} must be one of {schema['enum']}, got {value!r:.60}"
    if isinstance(value, dict) and ("properties" in schema or "required" in schema):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                return f"{where} is missing the required parameter {name!r}"
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(props))
            if extra:
                return (f"{where} has unknown parameter(s) {extra}: the parameters are "
                        f"{sorted(props)}")
        for name, sub in props.items():
            if name in value and isinstance(sub, dict):
                why = check_value(sub, value[name], f"parameter {name!r}")
                if why:
                    return why
    if isinstance(value, (list, tuple)) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            why = check_value(schema["items"], item, f"{where}[{i}]")
            if why:
                return why
    return None


def check_call(call: ToolCall, tools: list[dict[str, Any]] | None
               ) -> tuple[dict[str, Any] | None, str | None]:
    """`(arguments, None)` for a call that fits one of `tools`, else `(None, what to fix)`."""
    names = tool_names(tools)
    fn = find_tool(tools, call.name)
    if fn is None:
        known = ", ".join(names) or "none"
        return None, (f"unknown tool {call.name!r:.60}: call one of this environment's tools "
                      f"({known})")
    args = call.parsed_arguments()
    if isinstance(args, str):
        return None, args
    why = check_value(fn.get("parameters") or {"type": "object"}, args,
                      f"the arguments of {call.name!r}")
    if why:
        return None, f"{why}; see the {call.name!r} tool's parameters and call it again"
    return args, None


def as_tool_turn(action: Any) -> tuple[str, list[ToolCall]] | None:
    """`(content, calls)` for a structured action (a `ToolCall`, a list of them or of their
    OpenAI dicts, an OpenAI assistant message or its dict), None for a text action. A message
    without tool calls is `(content, [])`: the env takes its content as a text action."""
    if isinstance(action, str):
        return None
    if isinstance(action, ToolCall):
        return "", [action]
    if isinstance(action, (list, tuple)):
        return "", [ToolCall.from_openai(c, i) for i, c in enumerate(action)]
    if isinstance(action, dict):
        if "tool_calls" not in action and "role" not in action:
            if "function" in action or "name" in action:
                return "", [ToolCall.from_openai(action)]
            return None
        get = action.get
    elif hasattr(action, "tool_calls"):  # the OpenAI SDK's message object
        def get(k: str, d: Any = None) -> Any:
            return getattr(action, k, d)
    else:
        return None
    calls = get("tool_calls") or []
    return str(get("content") or ""), [ToolCall.from_openai(c, i) for i, c in enumerate(calls)]


def to_plain(action: Any) -> Any:
    """An action as plain JSON for records (`episodes.jsonl`): text as it is, a tool turn as
    `{"content", "tool_calls": [OpenAI entries]}`."""
    turn = as_tool_turn(action)
    if turn is None:
        return action
    content, calls = turn
    return {"content": content, "tool_calls": [c.to_openai() for c in calls]}


def play_tool_turn(env: Any, content: str, calls: list[ToolCall]) -> Any:
    """`TextEnv.step_tools`'s default: one assistant turn of structured calls played on `env`
    through its text protocol. The rules of a tool turn:

    - Each call runs as one text turn of the env (`env.tool_action(name, args)`), in order, so
      it counts against `max_turns` and is scored by the text protocol's rules: the episode's
      reward is the same task verdict as a text episode's. The first call that ends the
      episode ends the turn; later calls are answered "not run".
    - A malformed call (unknown tool, arguments that are not a JSON object, a schema
      violation: `check_call`) is played as `env.malformed_tool_action` (the family's
      malformed turn: its turn count, its format penalty, its end of budget) and its result
      says what to fix.
    - A message without calls is its text (`content`) played as a text action; an env without
      tools plays the content and answers each call that it takes text.

    The step's info is the last text turn's, with `tool_results` (`ToolResult.to_dict` per
    call, in call order); its reward the sum of the turns'; its observation the results'
    contents (the last turn's observation when the episode ended)."""
    if not calls or not env.tools:
        obs, reward, terminated, truncated, info = env.step(content)
        if not calls:
            return obs, reward, terminated, truncated, info
        info = dict(info)
        info["tool_results"] = [ToolResult(
            c.id, c.name, "not run: this environment declares no tools; reply in text as its "
            "instructions say", error=True).to_dict() for c in calls]
        return obs, reward, terminated, truncated, info
    results: list[ToolResult] = []
    total = 0.0
    for i, call in enumerate(calls):
        args, problem = check_call(call, env.tools)
        action = env.malformed_tool_action if args is None else env.tool_action(call.name, args)
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        done = terminated or truncated
        if problem is not None:
            note = "" if done else env.turns_left_note()
            results.append(ToolResult(call.id, call.name, f"Error: {problem}. {note}".strip(),
                                      error=True))
        else:
            results.append(ToolResult(call.id, call.name, env.tool_content(call.name, obs)))
        if done:
            results += [ToolResult(c.id, c.name, f"not run: the episode ended at call "
                                   f"{call.id or i}", error=True) for c in calls[i + 1:]]
            break
    info = dict(info)
    info["tool_results"] = [r.to_dict() for r in results]
    if not done:
        obs = results[0].content if len(results) == 1 else "\n\n".join(
            f"[{r.name} {r.call_id}] {r.content}" for r in results)
    return obs, total, terminated, truncated, info


__all__ = ["ToolCall", "ToolResult", "as_tool_turn", "check_call", "check_value", "find_tool",
           "function_tool", "play_tool_turn", "to_plain", "tool_names"]
