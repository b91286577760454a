#!/usr/bin/env python3
"""Fetch a served Agent Card like a real Python SDK client, then verify its signature.

Run with the oracle venv (see tests/oracle/README.md):

    $ORACLE/venv/bin/python tests/oracle/py_resolve.py \
        --base-url http://127.0.0.1:PORT --host HOST --jwks JWKS_FILE \
        [--path /.well-known/agent-card.json] [--timeout SECONDS]

Steps:
  1. An httpx.AsyncClient whose default headers carry `Host: HOST`, so one
     loopback server can be asked for any virtual host (trust_env=False: proxy
     variables never reroute a loopback request).
  2. The SDK's a2a.client.A2ACardResolver(client, base_url, path)
     .get_agent_card(signature_verifier=...): GET, raise_for_status, JSON, then
     the SDK's own parse_agent_card (legacy-field compatibility mapping and
     ParseDict with ignore_unknown_fields, i.e. exactly what SDK clients accept).
  3. The resolver hands the parsed card to the signature_verifier: the SDK's
     a2a.utils.signing.create_signature_verifier with a key provider that looks
     the protected header's kid up in the JWKS file, asymmetric algorithms only
     (JWKS loading, algorithms and kid lookup are shared with py_verify.py).

Prints one JSON line:
    {"valid": bool, "kid": <kid that verified or null>, "name": <card name or null>,
     "error": <reason or null>}
Exit status: 0 iff valid, 1 if the card could not be fetched/parsed or does not
verify, 2 on a usage error or an unreadable JWKS file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

# py_verify.py sits next to this file; importing it also quiets the SDK's logger.
sys.dont_write_bytecode = True  # leave no __pycache__ in the repo
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import httpx  # noqa: E402
from jwt import PyJWK  # noqa: E402
from jwt.exceptions import PyJWTError  # noqa: E402

from a2a.client import A2ACardResolver, AgentCardResolutionError  # noqa: E402
from a2a.types import AgentCard  # noqa: E402
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH  # noqa: E402
from a2a.utils.signing import (  # noqa: E402
    SignatureVerificationError,
    create_signature_verifier,
)

from py_verify import DEFAULT_ALGORITHMS, load_jwks, recording_key_provider  # noqa: E402


async def resolve(base_url: str, host: str, path: str, keys: dict[str, PyJWK],
                  algorithms: list[str], timeout: float) -> dict:
    result = {'valid': False, 'kid': None, 'name': None, 'error': None}

    key_provider, tried, unknown = recording_key_provider(keys)

    sdk_verifier = create_signature_verifier(key_provider, algorithms)
    seen: list[AgentCard] = []

    def verifier(card: AgentCard) -> None:
        seen.append(card)  # keep the parsed card even if verification fails
        sdk_verifier(card)

    async with httpx.AsyncClient(headers={'Host': host}, timeout=timeout,
                                 trust_env=False) as client:
        resolver = A2ACardResolver(client, base_url, agent_card_path=path)
        try:
            card = await resolver.get_agent_card(signature_verifier=verifier)
        except AgentCardResolutionError as e:
            result['error'] = f'resolve: {e}'
        except SignatureVerificationError as e:
            detail = f'{type(e).__name__}: {e}'
            if tried:
                detail += f' (did not verify with kid {", ".join(tried)})'
            if unknown:
                detail += f' (kid not in JWKS: {", ".join(unknown)})'
            result['error'] = detail
        except Exception as e:  # noqa: BLE001 - anything else is a failure too
            result['error'] = f'{type(e).__name__}: {e}'
        else:
            result['kid'] = tried[-1] if tried else None
            if not tried:  # cannot happen with a verifier that raised nothing
                result['error'] = 'no signature was checked'
            else:
                result['valid'] = True
        if seen:
            result['name'] = seen[-1].name
        elif result['valid']:
            result['name'] = card.name
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--base-url', required=True,
                        help='e.g. http://127.0.0.1:8080 (scheme://host:port)')
    parser.add_argument('--host', required=True,
                        help='value of the Host header sent with the request')
    parser.add_argument('--jwks', required=True, help='JWK Set file (public keys)')
    parser.add_argument('--path', default='/' + AGENT_CARD_WELL_KNOWN_PATH.lstrip('/'),
                        help='card path (default %(default)s)')
    parser.add_argument('--algorithms', default=','.join(DEFAULT_ALGORITHMS),
                        help='comma-separated JWS algorithms to accept')
    parser.add_argument('--timeout', type=float, default=10.0,
                        help='HTTP timeout in seconds (default %(default)s)')
    args = parser.parse_args()
    try:
        keys = load_jwks(args.jwks)
    except (OSError, ValueError, PyJWTError) as e:
        print(f'py_resolve: cannot load JWKS: {e}', file=sys.stderr)
        return 2
    algorithms = [a for a in args.algorithms.split(',') if a]
    result = asyncio.run(resolve(args.base_url, args.host, args.path, keys,
                                 algorithms, args.timeout))
    print(json.dumps(result), flush=True)
    return 0 if result['valid'] else 1


if __name__ == '__main__':
    sys.exit(main())
