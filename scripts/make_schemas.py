"""Write the JSON Schemas of the documents the gate writes, from the types that define them.

    python scripts/make_schemas.py          # rewrite gate/schemas/*.schema.json
    python scripts/make_schemas.py --check  # exit 1 if a committed schema is stale (the tests do this)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gate.schemas import SCHEMAS, generate

OUT = Path(__file__).resolve().parent.parent / "gate" / "schemas"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    stale = []
    for name in SCHEMAS:
        text = json.dumps(generate(name), indent=1, sort_keys=True) + "\n"
        path = OUT / f"{name}.schema.json"
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print("stale schemas (run python scripts/make_schemas.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
