"""Validate JSON documents against one JSON Schema file (its own $schema draft): one JSON
document per stdin line, one verdict line per document on stdout, {"ok": true} or
{"ok": false, "error": "..."}.

Usage: json_schema.py SCHEMA_FILE (e.g. tests/data/did-core/did-core.json).
"""
import json
import sys

from jsonschema.validators import validator_for


def main():
    with open(sys.argv[1]) as f:
        schema = json.load(f)
    cls = validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema)
    for line in sys.stdin:
        if not line.strip():
            continue
        errors = sorted(validator.iter_errors(json.loads(line)), key=lambda e: list(e.path))
        if errors:
            e = errors[0]
            where = "/".join(str(p) for p in e.path)
            print(json.dumps({"ok": False, "error": f"{where}: {e.message}"}), flush=True)
        else:
            print(json.dumps({"ok": True}), flush=True)


if __name__ == "__main__":
    main()
