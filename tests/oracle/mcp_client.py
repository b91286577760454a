"""An MCP host's side of the directory's /mcp tools, with the official MCP Python SDK.

Usage: mcp_client.py <url> [<host> [<bearer token>]] < calls.json
calls.json: [{"tool": name, "arguments": {...}}, ...]

Connects over streamable HTTP as a real client does (initialize, then list tools), calls each
tool in turn and prints one JSON line: {"server", "protocol", "tools": {name: input schema},
"calls": [{"tool", "isError", "structured", "text", "error"}]} where "error" is a JSON-RPC
error (code, message) the SDK raised instead of a result.
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url = sys.argv[1]
    headers = {}
    if len(sys.argv) > 2 and sys.argv[2]:
        headers["Host"] = sys.argv[2]
    if len(sys.argv) > 3 and sys.argv[3]:
        headers["Authorization"] = f"Bearer {sys.argv[3]}"
    calls = json.load(sys.stdin)
    out = {"calls": []}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                out["server"] = init.server_info.name
                out["protocol"] = init.protocol_version
                tools = await session.list_tools()
                out["tools"] = {t.name: t.input_schema for t in tools.tools}
                for call in calls:
                    record = {"tool": call["tool"]}
                    try:
                        r = await session.call_tool(call["tool"], call.get("arguments", {}))
                        record["isError"] = bool(r.is_error)
                        record["structured"] = r.structured_content
                        record["text"] = [c.text for c in r.content if c.type == "text"]
                    except MCPError as e:
                        record["error"] = {"code": e.code, "message": e.message}
                    out["calls"].append(record)
    print(json.dumps(out))


asyncio.run(main())
