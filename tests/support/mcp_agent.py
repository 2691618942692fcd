"""An agent program for the `command` harness's tests: what a user's OpenAI-client agent
looks like. It reads its model from OPENAI_BASE_URL / OPENAI_API_KEY / OPENAI_MODEL, reaches
the env through SKYHUB_MCP_URL with the official `mcp` SDK, and plays tool calls until the
episode ends: each turn it sends the conversation (with the env's tools) to the model and
calls the tools the model asked for."""

from __future__ import annotations

import asyncio
import json
import os

import openai
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    model = openai.OpenAI()  # the variables above
    async with streamable_http_client(os.environ["SKYHUB_MCP_URL"]) as (r, w, _), \
            ClientSession(r, w) as env:
        await env.initialize()
        tools = [{"type": "function", "function": {"name": t.name, "description":
                                                   t.description or "",
                                                   "parameters": t.inputSchema}}
                 for t in (await env.list_tools()).tools
                 if t.name not in ("reset", "episode_status")]
        start = (await env.call_tool("reset", {})).structuredContent
        messages = [{"role": "system", "content": start["system_prompt"]},
                    {"role": "user", "content": start["observation"]}]
        while not (await env.call_tool("episode_status", {})).structuredContent["done"]:
            reply = model.chat.completions.create(model=os.environ["OPENAI_MODEL"],
                                                  messages=messages, tools=tools)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls or []:
                result = await env.call_tool(call.function.name,
                                             json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": result.content[0].text})
    print("agent done")


if __name__ == "__main__":
    asyncio.run(main())
