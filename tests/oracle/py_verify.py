#!/usr/bin/env python3
"""Verify Agent Cards the way a strict client built on the official Python SDK does.

Run with the oracle venv (see tests/oracle/README.md):

    $ORACLE/venv/bin/python tests/oracle/py_verify.py --jwks JWKS_FILE CARD_FILE...

For each card, in order:
  1. json.loads the file; the top level must be an object.
  2. google.protobuf.json_format.ParseDict into a2a.types.AgentCard, STRICT
     (no ignore_unknown_fields): an unknown field anywhere is an error.
  3. The SDK's own REQUIRED-field check (a2a.utils.proto_utils.
     validate_proto_required_fields: every field annotated REQUIRED in a2a.proto,
     recursively - name, description, version, supportedInterfaces[*].{url,
     protocolBinding,protocolVersion}, capabilities, defaultInputModes,
     defaultOutputModes, skills[*].{id,name,description,tags}, provider.*,
     signatures[*].{protected,signature}, security scheme fields ...). Unless
     --signature-only.
  4. a2a.utils.signing.create_signature_verifier with a key provider that looks
     the protected header's kid up in the JWKS file (jku is ignored: the JWKS
     file is the trust anchor).

Prints one JSON line per card:
    {"file": ..., "valid": bool, "kid": <kid that verified or null>, "error": <reason or null>}
"valid" is true iff every step passed. "kid" is reported whenever a signature
verified, even if step 3 failed. With --all-kids a "kids" list is added: the
kid of every signature that verifies on its own (the card re-checked with only
that signature; key rotation tests). Exit status: 0 iff every card is valid, 1 if
any is not, 2 on a usage error or an unreadable JWKS file.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

# The SDK logs a warning for every card with missing REQUIRED fields; this
# script reports those itself, on stdout, as JSON.
logging.getLogger('a2a').setLevel(logging.ERROR)

from google.protobuf.json_format import ParseDict  # noqa: E402
from jwt import PyJWK  # noqa: E402
from jwt.exceptions import PyJWKError, PyJWTError  # noqa: E402

from a2a.types import AgentCard  # noqa: E402
from a2a.utils.errors import InvalidParamsError  # noqa: E402
from a2a.utils.proto_utils import validate_proto_required_fields  # noqa: E402
from a2a.utils.signing import (  # noqa: E402
    SignatureVerificationError,
    create_signature_verifier,
)

# Asymmetric algorithms only: an HMAC entry would let a public key be used as a
# shared secret (algorithm confusion).
DEFAULT_ALGORITHMS = [
    'ES256', 'ES384', 'ES512', 'EdDSA',
    'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512',
]


class UnknownKidError(PyJWKError):
    """Raised by the key provider; a PyJWTError, so the SDK tries the next signature."""


def load_jwks(path: str) -> dict[str, PyJWK]:
    with open(path, 'rb') as f:
        jwks = json.load(f)
    keys = jwks.get('keys') if isinstance(jwks, dict) else None
    if not isinstance(keys, list):
        raise ValueError(f'{path}: not a JWK Set (no "keys" array)')
    by_kid: dict[str, PyJWK] = {}
    for jwk in keys:
        if isinstance(jwk, dict) and isinstance(jwk.get('kid'), str):
            by_kid[jwk['kid']] = PyJWK(jwk)
    if not by_kid:
        raise ValueError(f'{path}: no key with a "kid"')
    return by_kid


def recording_key_provider(keys: dict[str, PyJWK]):
    """A key provider over `keys` that records the kids it handed out and the unknown ones.

    The SDK's verifier calls the key provider once per signature, in order, and stops at the
    first one that verifies: the last kid handed out is the kid that verified.
    Returns (provider, tried, unknown).
    """
    tried: list[str] = []
    unknown: list[str] = []

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        if kid is None or kid not in keys:
            unknown.append(str(kid))
            raise UnknownKidError(f'kid {kid!r} not in JWKS')
        tried.append(kid)
        return keys[kid]

    return key_provider, tried, unknown


def check_card(path: str, keys: dict[str, PyJWK], algorithms: list[str],
               signature_only: bool, all_kids: bool = False) -> dict:
    result = {'file': path, 'valid': False, 'kid': None, 'error': None}
    errors: list[str] = []
    try:
        with open(path, 'rb') as f:
            data = json.loads(f.read().decode('utf-8'))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        result['error'] = f'read/json: {e}'
        return result
    if not isinstance(data, dict):
        result['error'] = 'json: top level is not an object'
        return result

    card = AgentCard()
    try:
        ParseDict(data, card)  # strict: unknown fields are errors
    except Exception as e:  # ParseError mostly; anything else is a rejection too
        result['error'] = f'ParseDict: {type(e).__name__}: {e}'
        return result

    if not signature_only:
        try:
            validate_proto_required_fields(card)
        except InvalidParamsError as e:
            fields = [err['field'] for err in (e.data or {}).get('errors', [])]
            errors.append('REQUIRED fields missing or empty: ' + ', '.join(fields))

    key_provider, tried, unknown = recording_key_provider(keys)

    verifier = create_signature_verifier(key_provider, algorithms)
    try:
        verifier(card)
        result['kid'] = tried[-1]
    except SignatureVerificationError as e:
        detail = f'{type(e).__name__}: {e}'
        if tried:
            detail += f' (did not verify with kid {", ".join(tried)})'
        if unknown:
            detail += f' (kid not in JWKS: {", ".join(unknown)})'
        errors.insert(0, detail)
    except Exception as e:  # the SDK lets e.g. MessageToDict's ValueError escape
        errors.insert(0, f'verifier raised {type(e).__name__}: {e}')

    if all_kids:
        result['kids'] = kids_verifying_alone(card, keys, algorithms)

    if errors:
        result['error'] = '; '.join(errors)
    else:
        result['valid'] = True
    return result


def kids_verifying_alone(card: AgentCard, keys: dict[str, PyJWK],
                         algorithms: list[str]) -> list[str]:
    """Kids of the signatures that verify on their own (one SDK call each)."""
    kids: list[str] = []
    for sig in card.signatures:
        single = AgentCard()
        single.CopyFrom(card)
        del single.signatures[:]
        single.signatures.append(sig)
        seen: list[str] = []

        def key_provider(kid: str | None, jku: str | None) -> PyJWK:
            if kid is None or kid not in keys:
                raise UnknownKidError(f'kid {kid!r} not in JWKS')
            seen.append(kid)
            return keys[kid]

        try:
            create_signature_verifier(key_provider, algorithms)(single)
            kids.append(seen[-1])
        except Exception:  # noqa: BLE001 - this signature does not verify
            pass
    return kids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--jwks', required=True, help='JWK Set file (public keys)')
    parser.add_argument('--algorithms', default=','.join(DEFAULT_ALGORITHMS),
                        help='comma-separated JWS algorithms to accept')
    parser.add_argument('--signature-only', action='store_true',
                        help='skip the REQUIRED-field check (ParseDict stays strict)')
    parser.add_argument('--all-kids', action='store_true',
                        help='add "kids": every kid whose signature verifies on its own')
    parser.add_argument('cards', nargs='+', metavar='CARD_FILE')
    args = parser.parse_args()
    try:
        keys = load_jwks(args.jwks)
    except (OSError, ValueError, PyJWTError) as e:
        print(f'py_verify: cannot load JWKS: {e}', file=sys.stderr)
        return 2
    algorithms = [a for a in args.algorithms.split(',') if a]
    all_valid = True
    for path in args.cards:
        result = check_card(path, keys, algorithms, args.signature_only,
                            args.all_kids)
        all_valid &= result['valid']
        print(json.dumps(result), flush=True)
    return 0 if all_valid else 1


if __name__ == '__main__':
    sys.exit(main())
