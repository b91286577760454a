"""Validate registry responses against the ARD v0.9 schemas (tests/data/ard-v0.9, see its
SOURCE.txt): one JSON request per stdin line, {"schema": NAME, "doc": ...}, one verdict line
per request on stdout, {"ok": true} or {"ok": false, "error": "..."}.

NAME is "manifest" (ai-catalog.schema.json) or a component of ard.openapi.yaml
(SearchResponse, ListResponse, ExploreResponse, Error) or "catalogEntry".
Usage: ard_validate.py ARD_DIR
"""
import json
import sys

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

BASE = "https://ard.test/"


def main() -> None:
    ard_dir = sys.argv[1]
    with open(f"{ard_dir}/ai-catalog.schema.json") as f:
        catalog = json.load(f)
    with open(f"{ard_dir}/ard.openapi.yaml") as f:
        openapi = yaml.safe_load(f)
    # The OpenAPI document refers to the catalog schema by a relative path: serve both under
    # one base, the catalog schema also under its own $id (its internal refs use it).
    catalog_resource = Resource.from_contents(catalog)
    api_doc = dict(openapi)
    api_doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    api_resource = Resource.from_contents(api_doc)
    registry = Registry().with_resources(
        [
            (BASE + "ai-catalog.schema.json", catalog_resource),
            (catalog["$id"], catalog_resource),
            (BASE + "ard.openapi.json", api_resource),
        ]
    )
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        name = req["schema"]
        if name == "manifest":
            schema = {"$ref": BASE + "ai-catalog.schema.json"}
        elif name == "catalogEntry":
            schema = {"$ref": BASE + "ai-catalog.schema.json#/$defs/catalogEntry"}
        else:
            schema = {"$ref": BASE + "ard.openapi.json#/components/schemas/" + name}
        validator = Draft202012Validator(schema, registry=registry, format_checker=Draft202012Validator.FORMAT_CHECKER)
        errors = sorted(validator.iter_errors(req["doc"]), key=lambda e: list(e.absolute_path))
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.absolute_path)
            print(json.dumps({"ok": False, "error": f"{where}: {first.message}"}), flush=True)
        else:
            print(json.dumps({"ok": True}), flush=True)


if __name__ == "__main__":
    main()
