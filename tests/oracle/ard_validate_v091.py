"""Validate registry responses against ARD v0.91
(tests/data/ard-v0.91, see its SOURCE.txt). Same protocol as tests/oracle/ard_validate.py:
one JSON request per stdin line, {"schema": NAME, "doc": ...}; one verdict line per request,
{"ok": true} or {"ok": false, "error": "..."}.

NAME is "manifest" (draft #/$defs/ardManifest), "ardEntry", "ardEntryProjection", or a
component of ard.openapi.yaml (ArdEntry, SearchResponse, ListResponse, ExploreResponse,
Error, SearchRequest, ExploreRequest, ...).
Usage: ard_validate_v091.py ARD_DIR

The OpenAPI file refers to ./ard-entry.schema.json#/$defs/{ArdEntry,EntryFields} (the
published, PascalCase names). Only a pre-publish draft with camelCase $defs is stored, so a
small alias document is served at that address, each published name a $ref to the draft's
camelCase definition. The data files stay unedited.
"""
import json
import sys

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

BASE = "https://ard.test/"
DRAFT_FILE = "ard-entry.schema.draft-251e639b.json"
# published name (PR #81) -> draft name (ars-system/ard-spec@251e639b)
ALIASES = {
    "ArdEntry": "ardEntry",
    "ArdManifest": "ardManifest",
    "EntryFields": "entryFields",
    "TrustManifest": "trustManifest",
}


def main() -> None:
    ard_dir = sys.argv[1]
    with open(f"{ard_dir}/{DRAFT_FILE}") as f:
        draft = json.load(f)
    with open(f"{ard_dir}/ard.openapi.yaml") as f:
        openapi = yaml.safe_load(f)
    draft_resource = Resource.from_contents(draft)
    alias = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": {pub: {"$ref": f"{draft['$id']}#/$defs/{d}"} for pub, d in ALIASES.items()},
    }
    api_doc = dict(openapi)
    api_doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    registry = Registry().with_resources(
        [
            (draft["$id"], draft_resource),
            (BASE + "ard-entry.schema.draft.json", draft_resource),
            (BASE + "ard-entry.schema.json", Resource.from_contents(alias)),
            (BASE + "ard.openapi.json", Resource.from_contents(api_doc)),
        ]
    )
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        name = req["schema"]
        if name == "manifest":
            schema = {"$ref": BASE + "ard-entry.schema.draft.json#/$defs/ardManifest"}
        elif name in ("ardEntry", "ardEntryProjection", "entryFields"):
            schema = {"$ref": BASE + "ard-entry.schema.draft.json#/$defs/" + name}
        else:
            schema = {"$ref": BASE + "ard.openapi.json#/components/schemas/" + name}
        validator = Draft202012Validator(
            schema, registry=registry, format_checker=Draft202012Validator.FORMAT_CHECKER
        )
        errors = sorted(validator.iter_errors(req["doc"]), key=lambda e: list(e.absolute_path))
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.absolute_path)
            print(json.dumps({"ok": False, "error": f"{where}: {first.message}"}), flush=True)
        else:
            print(json.dumps({"ok": True}), flush=True)


if __name__ == "__main__":
    main()
