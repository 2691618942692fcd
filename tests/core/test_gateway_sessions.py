"""The gateway's sessions without a model: which request extends which record, and how a
session's records become segments (`skyhub.gateway.sessions`)."""

from __future__ import annotations

from skyhub.gateway.sessions import Record, Session, message_key


def rec(messages, prompt, completion, reply, tools=None) -> Record:
    return Record(request_id="r", messages=messages, tools=tools, prompt_ids=prompt,
                  completion_ids=completion, logprobs=[-1.0] * len(completion),
                  versions=[7] * len(completion), finish_reason="stop", reply=reply)


CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_a", "type": "function",
     "function": {"name": "bash", "arguments": '{"command": "ls", "n": 1}'}}]}


def test_arguments_compare_as_json_values_and_reply_call_ids_are_not_compared():
    same = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "other", "function": {"name": "bash", "arguments": {"n": 1, "command": "ls"}}}]}
    assert message_key(CALL, call_ids=False) == message_key(same, call_ids=False)
    assert message_key(CALL) != message_key(same)
    changed = {**same, "tool_calls": [{"id": "x", "function": {
        "name": "bash", "arguments": {"n": 2, "command": "ls"}}}]}
    assert message_key(CALL, call_ids=False) != message_key(changed, call_ids=False)


def test_extends_the_latest_matching_record_with_the_same_tools():
    s = Session("s")
    user = [{"role": "user", "content": "go"}]
    s.add(rec(user, [1, 2], [3, 4], CALL))
    tool = {"role": "tool", "tool_call_id": "call_a", "content": "out"}
    found = s.extends([*user, CALL, tool], None)
    assert found is not None and found[1] == [tool]
    assert s.extends([*user, CALL, tool], [{"type": "function",
                                            "function": {"name": "bash"}}]) is None
    assert s.extends([*user, CALL], None) is None  # nothing new after the reply
    edited = {**CALL, "tool_calls": [{"id": "call_a", "function": {
        "name": "bash", "arguments": '{"command": "rm"}'}}]}
    assert s.extends([*user, edited, tool], None) is None  # the agent changed the turn


def test_segments_merge_extensions_and_split_the_rest():
    s = Session("s")
    s.add(rec([], [1, 2], [3, 4], {}))             # segment 0
    s.add(rec([], [9, 9], [5], {}))                # a summary: segment 1
    s.add(rec([], [1, 2, 3, 4, 8], [6], {}))       # extends segment 0
    s.add(rec([], [1, 2, 3], [0], {}))             # a history cut short: segment 2
    segs = s.segments()
    assert [g.records for g in segs] == [[0, 2], [1], [3]]
    first = segs[0]
    assert first.prompt_ids == [1, 2] and first.token_ids == [3, 4, 8, 6]
    assert first.mask == [1, 1, 0, 1]
    assert first.logprobs == [-1.0, -1.0, 0.0, -1.0] and first.versions == [7, 7, -1, 7]
