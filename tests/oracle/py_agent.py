"""A real A2A agent's card endpoint, built with the official Python SDK (a2a-sdk 1.3.0).

The SDK's own Starlette route (`create_agent_card_routes`) serves the card, with its ETag and
304 handling; uvicorn runs it. The import tests point an AgentCard's `spec.source` at it.

A control file (JSON, re-read on every request) says what the agent serves:
  {"mode": "v1", "version": "1.0.0"}   the SDK's v1.0 card (with a 0.x interface, the SDK also
                                        writes the v0.3 fields beside the v1.0 ones)
  {"mode": "v03", ...}                  the same card as a pure v0.3 card (the SDK's converter)
  {"mode": "garbage"}                   a broken body
`version` changes the card, so a refresh sees a new one. With --requests FILE, each request
appends its path to FILE as a line (tests count the requests an agent received).
With `"extended": true` the card says `capabilities.extendedAgentCard` and GET
/extendedAgentCard (the REST binding's GetExtendedAgentCard) answers the extended card (the
card with a longer description and one more skill, `echo-history`) to a request with
`Authorization: Bearer <token>`, 401 to one without; with --tokens FILE, the last token
received is written to FILE (tests ask the API server who it names).

Usage: py_agent.py --port PORT --control FILE [--internal-url URL] [--requests FILE]
                   [--tokens FILE]
"""

import argparse
import json

import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from a2a.compat.v0_3.conversions import to_compat_agent_card
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
)


def control(path):
    with open(path) as f:
        return json.load(f)


def build_card(internal_url, version, protocol_version, extended=False):
    card = AgentCard(
        name="Echo Agent",
        description="Echoes what it is told.",
        version=version,
        provider=AgentProvider(organization="Example Org", url="https://example.org"),
        supported_interfaces=[
            AgentInterface(
                url=internal_url,
                protocol_binding="JSONRPC",
                protocol_version=protocol_version,
            )
        ],
        capabilities=AgentCapabilities(streaming=True, extended_agent_card=extended or None),
        default_input_modes=["text"],
        default_output_modes=["text", "application/json"],
        skills=[
            AgentSkill(
                id="echo",
                name="Echo",
                description="Repeats the input.",
                tags=["echo", "test"],
                # Allowed by the proto, and common in SDK-built cards.
                examples=["", "say hello"],
            )
        ],
    )
    return card


def extended_card(internal_url, version):
    card = build_card(internal_url, version, "1.0", extended=True)
    card.description = "Echoes what it is told, and remembers what it was told before."
    card.skills.append(
        AgentSkill(
            id="echo-history",
            name="Echo history",
            description="Repeats what was said earlier.",
            tags=["echo"],
        )
    )
    return card


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--control", required=True)
    ap.add_argument("--internal-url", default="http://echo.team.svc:9999/")
    ap.add_argument("--requests")
    ap.add_argument("--tokens")
    args = ap.parse_args()

    async def modifier(card):
        c = control(args.control)
        fresh = build_card(
            args.internal_url, c.get("version", "1.0.0"), "1.0", c.get("extended", False)
        )
        return fresh

    async def get_extended(request):
        c = control(args.control)
        if not c.get("extended", False):
            return JSONResponse({"error": {"code": 400, "status": "FAILED_PRECONDITION",
                                           "message": "no extended card"}}, status_code=400)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return JSONResponse({"error": {"code": 401, "status": "UNAUTHENTICATED",
                                           "message": "a bearer token is required"}},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        if args.tokens:
            with open(args.tokens, "w") as f:
                f.write(token)
        card = extended_card(args.internal_url, c.get("version", "1.0.0"))
        return JSONResponse(agent_card_to_dict(card))

    routes = create_agent_card_routes(
        build_card(args.internal_url, "1.0.0", "1.0"), card_modifier=modifier
    ) + [Route("/extendedAgentCard", get_extended, methods=["GET"])]

    class Modes(BaseHTTPMiddleware):
        async def dispatch(self, request, call_next):
            if args.requests:
                with open(args.requests, "a") as f:
                    f.write(request.url.path + "\n")
            c = control(args.control)
            mode = c.get("mode", "v1")
            if mode == "garbage":
                return Response("<html>internal error</html>", media_type="application/json")
            if mode == "v03":
                card = build_card(args.internal_url, c.get("version", "1.0.0"), "0.3")
                v03 = to_compat_agent_card(card).model_dump(
                    mode="json", by_alias=True, exclude_none=True
                )
                return JSONResponse(v03)
            return await call_next(request)

    app = Starlette(routes=routes)
    app.add_middleware(Modes)
    uvicorn.run(app, host="0.0.0.0", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
