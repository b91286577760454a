"""A small ARD registry (not ours) for federation tests, written from the ARD v0.9 OpenAPI
(tests/data/ard-v0.9/ard.openapi.yaml): `GET /agents` lists catalog entries in pages
(`pageSize`, `pageToken`, a strong ETag on each page, 304 on If-None-Match), and each card is
either inline (`data`) or at `url` on this server (`GET /cards/<name>.json`, with an ETag).

Usage: ard_registry.py CARDS_DIR PAGE_SIZE   (prints `listening http://127.0.0.1:PORT`)
CARDS_DIR holds <name>.json cards; a name starting with `inline-` is listed inline.
Every request line is appended to CARDS_DIR/../requests.log.
"""
import hashlib
import http.server
import json
import os
import sys
import urllib.parse

CARDS, PAGE = sys.argv[1], int(sys.argv[2])
LOG = os.path.join(os.path.dirname(os.path.abspath(CARDS)), "requests.log")


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, status, body, etag=None):
        self.send_response(status)
        if etag:
            self.send_header("ETag", etag)
        if body is not None:
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body is not None:
            self.wfile.write(body)

    def do_GET(self):
        with open(LOG, "a") as f:
            f.write(self.requestline + "\n")
        url = urllib.parse.urlsplit(self.path)
        port = self.server.server_address[1]
        if url.path == "/agents":
            q = urllib.parse.parse_qs(url.query)
            size = min(int(q.get("pageSize", ["20"])[0]), PAGE)
            start = int(q.get("pageToken", ["0"])[0])
            names = sorted(n[:-5] for n in os.listdir(CARDS) if n.endswith(".json"))
            items = []
            for name in names[start:start + size]:
                with open(os.path.join(CARDS, name + ".json"), "rb") as f:
                    card = json.loads(f.read())
                entry = {"identifier": f"urn:air:ard.example:catalog:{name}",
                         "displayName": card.get("name", name),
                         "type": "application/a2a-agent-card+json"}
                if name.startswith("inline-"):
                    entry["data"] = card
                else:
                    entry["url"] = f"http://127.0.0.1:{port}/cards/{name}.json"
                items.append(entry)
            out = {"items": items, "total": len(names)}
            if start + size < len(names):
                out["pageToken"] = str(start + size)
            body = json.dumps(out).encode()
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            if self.headers.get("If-None-Match") == etag:
                return self.send(304, None, etag)
            return self.send(200, body, etag)
        if url.path.startswith("/cards/"):
            path = os.path.join(CARDS, os.path.basename(url.path))
            if not os.path.exists(path):
                return self.send(404, b"{}")
            with open(path, "rb") as f:
                body = f.read()
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            if self.headers.get("If-None-Match") == etag:
                return self.send(304, None, etag)
            return self.send(200, body, etag)
        self.send(404, b'{"errorCode": "NOT_FOUND", "message": "nothing here"}')


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
