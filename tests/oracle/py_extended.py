#!/usr/bin/env python3
"""Fetch an agent's authenticated extended card like a real Python SDK client (REST binding),
then verify its signature.

Run with the oracle venv (see tests/oracle/README.md):

    $ORACLE/venv/bin/python tests/oracle/py_extended.py \
        --base-url http://127.0.0.1:PORT --host HOST --interface-path /a2a \
        --jwks JWKS_FILE [--binding HTTP+JSON|JSONRPC] [--token TOKEN] [--timeout SECONDS]

Steps:
  1. An httpx.AsyncClient whose default headers carry `Host: HOST` (one loopback server
     answers for any virtual host; trust_env=False) and, with --token, `Authorization:
     Bearer TOKEN`.
  2. The SDK's A2ACardResolver fetches the public card (it must advertise
     capabilities.extendedAgentCard, or the SDK never asks for the extended one).
  3. The SDK's transport for --binding (RestTransport, the default, or JsonRpcTransport) at
     BASE_URL + interface path .get_extended_agent_card(GetExtendedAgentCardRequest()): REST
     `GET {interface}/extendedAgentCard`, or the JSON-RPC method `GetExtendedAgentCard`, with
     the SDK's own error mapping and lenient parsing.
  4. The SDK's signature verifier (create_signature_verifier with the JWKS file's keys)
     checks the extended card.

Prints one JSON line:
    {"ok": bool, "verified": bool, "skills": [ids] or null, "description": str or null,
     "error": "<ExceptionClass>: message" or null}
Exit status: 0 iff the extended card was fetched and verifies; 1 otherwise; 2 on a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in the repo
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import httpx  # noqa: E402
from jwt.exceptions import PyJWTError  # noqa: E402

from a2a.client import A2ACardResolver  # noqa: E402
from a2a.client.transports.jsonrpc import JsonRpcTransport  # noqa: E402
from a2a.client.transports.rest import RestTransport  # noqa: E402
from a2a.types import GetExtendedAgentCardRequest  # noqa: E402
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, VERSION_HEADER  # noqa: E402
from a2a.utils.signing import create_signature_verifier  # noqa: E402

from py_verify import DEFAULT_ALGORITHMS, load_jwks, recording_key_provider  # noqa: E402


async def fetch(args, keys) -> dict:
    result = {'ok': False, 'verified': False, 'skills': None, 'description': None,
              'error': None}
    # The version header the SDK's ClientFactory sets on every client it makes (the transports
    # are made directly here: the card's interface URLs name the public host).
    headers = {'Host': args.host, VERSION_HEADER: PROTOCOL_VERSION_CURRENT}
    if args.token:
        headers['Authorization'] = f'Bearer {args.token}'
    async with httpx.AsyncClient(headers=headers, timeout=args.timeout,
                                 trust_env=False) as client:
        try:
            public = await A2ACardResolver(client, args.base_url).get_agent_card()
            if not public.capabilities.extended_agent_card:
                result['error'] = 'the public card does not advertise an extended card'
                return result
            kind = JsonRpcTransport if args.binding == 'JSONRPC' else RestTransport
            transport = kind(client, public,
                                      args.base_url + args.interface_path,
                                      is_shared_httpx=True)
            card = await transport.get_extended_agent_card(GetExtendedAgentCardRequest())
        except Exception as e:  # noqa: BLE001 - every failure is reported
            result['error'] = f'{type(e).__name__}: {e}'
            return result
    result['ok'] = True
    result['skills'] = [s.id for s in card.skills]
    result['description'] = card.description
    key_provider, _tried, _unknown = recording_key_provider(keys)
    try:
        create_signature_verifier(key_provider, DEFAULT_ALGORITHMS)(card)
        result['verified'] = True
    except Exception as e:  # noqa: BLE001
        result['error'] = f'verify: {type(e).__name__}: {e}'
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--base-url', required=True, help='e.g. http://127.0.0.1:8080')
    parser.add_argument('--host', required=True, help='the Host header sent')
    parser.add_argument('--interface-path', required=True,
                        help="the REST interface's path on the host, e.g. /a2a")
    parser.add_argument('--jwks', required=True, help='JWK Set file (public keys)')
    parser.add_argument('--token', help='bearer token')
    parser.add_argument('--binding', choices=['HTTP+JSON', 'JSONRPC'], default='HTTP+JSON')
    parser.add_argument('--timeout', type=float, default=10.0)
    args = parser.parse_args()
    try:
        keys = load_jwks(args.jwks)
    except (OSError, ValueError, PyJWTError) as e:
        print(f'py_extended: cannot load JWKS: {e}', file=sys.stderr)
        return 2
    result = asyncio.run(fetch(args, keys))
    print(json.dumps(result), flush=True)
    return 0 if result['ok'] and result['verified'] else 1


if __name__ == '__main__':
    sys.exit(main())
