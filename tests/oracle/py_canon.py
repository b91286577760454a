#!/usr/bin/env python3
"""Differential oracle: the exact bytes the official Python SDK signs for a card.

Run with the oracle venv (see tests/oracle/README.md):

    $ORACLE/venv/bin/python tests/oracle/py_canon.py [--stream] < cards.jsonl

Input: JSON Lines on stdin, one A2A v1.0 Agent Card (ProtoJSON) per line.
Output: exactly one line per input line, in order:
    <standard base64 of the canonical payload bytes>
or
    ERR <one-line message>
where the payload is a2a.utils.signing._canonicalize_agent_card (a2a-sdk 1.3.0)
applied after a STRICT google.protobuf.json_format.ParseDict into
a2a.types.AgentCard (unknown fields -> ERR). These are the bytes that go into
the JWS signing input as b64url(payload). A blank input line gives an ERR line
too, so line N of the output always answers line N of the input.

By default all of stdin is read before anything is written, so a caller may
write every card, close stdin and then read stdout without risking a pipe
deadlock. With --stream each line is answered (and flushed) as soon as it is
read, for callers that keep one process and talk to it line by line.
"""

from __future__ import annotations

import base64
import json
import logging
import sys

# _canonicalize_agent_card logs a warning for each card missing REQUIRED fields.
logging.getLogger('a2a').setLevel(logging.ERROR)

from google.protobuf.json_format import ParseDict  # noqa: E402

from a2a.types import AgentCard  # noqa: E402
from a2a.utils.signing import _canonicalize_agent_card  # noqa: E402


def canon_line(line: bytes) -> str:
    line = line.rstrip(b'\r\n')
    if not line.strip():
        return 'ERR empty line'
    try:
        data = json.loads(line.decode('utf-8'))
    except (UnicodeDecodeError, ValueError) as e:
        return _err('json', e)
    if not isinstance(data, dict):
        return 'ERR json: top level is not an object'
    card = AgentCard()
    try:
        ParseDict(data, card)  # strict: unknown fields are errors
    except Exception as e:  # noqa: BLE001 - any rejection is an answer
        return _err('ParseDict', e)
    try:
        payload = _canonicalize_agent_card(card).encode('utf-8')
    except Exception as e:  # noqa: BLE001
        return _err('canonicalize', e)
    return base64.b64encode(payload).decode('ascii')


def _err(stage: str, e: BaseException) -> str:
    msg = f'{stage}: {type(e).__name__}: {e}'
    return 'ERR ' + ' '.join(msg.split())


def main() -> int:
    stream = '--stream' in sys.argv[1:]
    unknown = [a for a in sys.argv[1:] if a != '--stream']
    if unknown:
        print(f'usage: {sys.argv[0]} [--stream] < cards.jsonl', file=sys.stderr)
        return 2
    stdin = sys.stdin.buffer
    out = sys.stdout
    if stream:
        for line in stdin:
            out.write(canon_line(line) + '\n')
            out.flush()
        return 0
    data = stdin.read()
    lines = data.split(b'\n')
    if lines and lines[-1] == b'':
        lines.pop()  # the input's final newline ends the last line
    out.write(''.join(canon_line(line) + '\n' for line in lines))
    out.flush()
    return 0


if __name__ == '__main__':
    sys.exit(main())
