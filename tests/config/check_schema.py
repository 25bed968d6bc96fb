#!/usr/bin/env python3
"""Checks configs/strata-config.schema.json with the `jsonschema` package:
the schema is a valid draft 2020-12 schema, the shipped configurations and
data/full.json conform to it, and it accepts exactly the documents of
data/cases.json that the loader accepts (except "loader_only" cases, whose rule
a schema cannot express). Run by ctest when Python has jsonschema."""
import json
import sys
from pathlib import Path

import jsonschema

configs, data = Path(sys.argv[1]), Path(sys.argv[2])
schema = json.loads((configs / "strata-config.schema.json").read_text())
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)

failures = []
for doc_path in [configs / "default.json", configs / "cpu-only.json", data / "full.json"]:
    for error in validator.iter_errors(json.loads(doc_path.read_text())):
        failures.append(f"{doc_path}: {error.json_path}: {error.message}")
for case in json.loads((data / "cases.json").read_text())["cases"]:
    expected = case["valid"] or case.get("loader_only", False)
    if validator.is_valid(case["doc"]) != expected:
        failures.append(f"case {case['name']!r}: schema says {'valid' if not expected else 'invalid'}")

for f in failures:
    print(f)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
