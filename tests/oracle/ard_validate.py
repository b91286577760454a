"""Validate registry responses against the ARD schemas kept in tests/data: one JSON request per
stdin line, {"schema": NAME, "doc": ...}, one verdict line per request on stdout, {"ok": true}
or {"ok": false, "error": "..."}.

Usage: ard_validate.py ARD_DIR, where ARD_DIR is
- tests/data/ard-v0.9 (see its SOURCE.txt): NAME is "manifest" (ai-catalog.schema.json),
  "catalogEntry", or a component of ard.openapi.yaml (SearchResponse, ListResponse,
  ExploreResponse, Error);
- tests/data/ard-v0.91 (see its SOURCE.txt): NAME is "manifest" (the draft entry schema's
  #/$defs/ardManifest), "ardEntry", "ardEntryProjection", "entryFields", or a component of
  ard.openapi.yaml (ArdEntry, SearchResponse, ListResponse, ExploreResponse, Error, ...).
  That OpenAPI file refers to ./ard-entry.schema.json#/$defs/{ArdEntry,EntryFields} (the
  published PascalCase names); only a pre-publish draft with camelCase $defs is stored, so a
  small alias document is served at that address, each published name a $ref to the draft's
  definition. The data files stay unedited.
"""
import json
import os
import sys

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

BASE = "https://ard.test/"
DRAFT_FILE = "ard-entry.schema.draft-251e639b.json"
# v0.91: published name (PR #81) -> draft name (ars-system/ard-spec@251e639b)
ALIASES = {
    "ArdEntry": "ardEntry",
    "ArdManifest": "ardManifest",
    "EntryFields": "entryFields",
    "TrustManifest": "trustManifest",
}


def load(path):
    with open(path) as f:
        return yaml.safe_load(f) if path.endswith(".yaml") else json.load(f)


def api_resource(ard_dir):
    api_doc = dict(load(f"{ard_dir}/ard.openapi.yaml"))
    api_doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return (BASE + "ard.openapi.json", Resource.from_contents(api_doc))


def v09(ard_dir):
    """The v0.9 registry and the schema of each NAME."""
    catalog = load(f"{ard_dir}/ai-catalog.schema.json")
    # The OpenAPI document refers to the catalog schema by a relative path: serve both under
    # one base, the catalog schema also under its own $id (its internal refs use it).
    resource = Resource.from_contents(catalog)
    registry = Registry().with_resources(
        [(BASE + "ai-catalog.schema.json", resource), (catalog["$id"], resource), api_resource(ard_dir)]
    )
    named = {
        "manifest": BASE + "ai-catalog.schema.json",
        "catalogEntry": BASE + "ai-catalog.schema.json#/$defs/catalogEntry",
    }
    return registry, named


def v091(ard_dir):
    """The v0.91 registry and the schema of each NAME."""
    draft = load(f"{ard_dir}/{DRAFT_FILE}")
    resource = Resource.from_contents(draft)
    alias = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": {pub: {"$ref": f"{draft['$id']}#/$defs/{d}"} for pub, d in ALIASES.items()},
    }
    registry = Registry().with_resources(
        [
            (draft["$id"], resource),
            (BASE + "ard-entry.schema.draft.json", resource),
            (BASE + "ard-entry.schema.json", Resource.from_contents(alias)),
            api_resource(ard_dir),
        ]
    )
    named = {"manifest": BASE + "ard-entry.schema.draft.json#/$defs/ardManifest"}
    for name in ("ardEntry", "ardEntryProjection", "entryFields"):
        named[name] = BASE + "ard-entry.schema.draft.json#/$defs/" + name
    return registry, named


def main() -> None:
    ard_dir = sys.argv[1]
    registry, named = v091(ard_dir) if os.path.exists(f"{ard_dir}/{DRAFT_FILE}") else v09(ard_dir)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        name = req["schema"]
        ref = named.get(name, BASE + "ard.openapi.json#/components/schemas/" + name)
        validator = Draft202012Validator(
            {"$ref": ref}, registry=registry, format_checker=Draft202012Validator.FORMAT_CHECKER
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
