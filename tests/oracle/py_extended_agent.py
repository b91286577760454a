"""An A2A agent built with the official Python SDK that serves its extended card from the files
the operator's ConfigMaps hold, as a Pod mounting them would (JSON-RPC binding).

The public card is the bytes of ConfigMap `agentcard-<name>` (key `agent-card.json`), the
extended card those of `extended-agentcard-<name>` (key `extended-agent-card.json`). Both are
parsed with the SDK's own `parse_agent_card` and handed to its `DefaultRequestHandler`
(`extended_agent_card=`); the SDK's Starlette routes serve the public card at
`/.well-known/agent-card.json` and answer JSON-RPC at `--rpc-path`, where `GetExtendedAgentCard`
returns the extended card. The agent does no work: it only describes itself.

Usage: py_extended_agent.py --port PORT --card FILE --extended FILE [--rpc-path /a2a]
Prints "listening PORT" on stdout once the port is bound (`--port 0`: a free one).
"""

import argparse
import json
import socket

import uvicorn
from starlette.applications import Starlette

from a2a.client.card_resolver import parse_agent_card
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore


class Describes(AgentExecutor):
    """An agent that only describes itself."""

    async def execute(self, context, event_queue):
        raise NotImplementedError("this agent only serves its cards")

    async def cancel(self, context, event_queue):
        raise NotImplementedError("this agent only serves its cards")


def load(path):
    with open(path) as f:
        return parse_agent_card(json.load(f))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--card", required=True)
    ap.add_argument("--extended", required=True)
    ap.add_argument("--rpc-path", default="/a2a")
    args = ap.parse_args()
    public, extended = load(args.card), load(args.extended)
    handler = DefaultRequestHandler(
        agent_executor=Describes(),
        task_store=InMemoryTaskStore(),
        agent_card=public,
        extended_agent_card=extended,
    )
    routes = create_agent_card_routes(public) + create_jsonrpc_routes(handler, args.rpc_path)
    # Bound here, before uvicorn starts: a client connecting once "listening" is printed waits
    # in the backlog instead of being refused. Port 0 picks a free port, printed.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(64)
    print(f"listening {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(Starlette(routes=routes), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])

if __name__ == "__main__":
    main()
