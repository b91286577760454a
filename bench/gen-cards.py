#!/usr/bin/env python3
"""bench/gen-cards.py OUT N: N A2A cards as OUT/agent-<i>.bench.test.json (the layout
`serve --from-dir` reads), the same for a given N on every run (seeded), for the benchmarks
that serve a directory of cards (bench/directory-wrk, bench/dir-follow)."""
import json
import os
import random
import sys

out, n = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
rnd = random.Random(7)
skills = ["forecast", "translate", "summarize", "book-flight", "quote", "trade", "search", "classify",
          "extract", "route", "schedule", "remind", "transcribe", "draw", "code-review", "deploy"]
tags = ["weather", "travel", "finance", "language", "ops", "security", "media", "legal", "health", "retail"]
words = ["fast", "reliable", "agent", "helps", "daily", "tasks", "city", "planning", "budget", "reports"]
for i in range(n):
    host = f"agent-{i:06d}.bench.test"
    card = {
        "name": f"{rnd.choice(words)} {rnd.choice(tags)} agent {i}",
        "description": " ".join(rnd.choice(words) for _ in range(8)),
        "version": "1.0.0",
        "provider": {"organization": rnd.choice(["Acme", "Globex", "Initech", "Hooli"]), "url": "https://example.com"},
        "supportedInterfaces": [{"url": f"https://{host}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": rnd.random() < 0.5},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["application/json"],
        "skills": [{"id": s, "name": f"{s} skill", "description": " ".join(rnd.choice(words) for _ in range(4)),
                    "tags": rnd.sample(tags, 2), "examples": [f"{rnd.choice(words)} {s}"]}
                   for s in rnd.sample(skills, rnd.randint(1, 3))],
    }
    with open(f"{out}/{host}.json", "w") as f:
        json.dump(card, f)
