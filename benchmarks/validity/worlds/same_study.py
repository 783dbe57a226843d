"""Do two analyses of the same world agree? Every row's outcomes and predictors, compared field by field.

    python benchmarks/validity/worlds/same_study.py A/worlds_analysis.json B/worlds_analysis.json WORLD

Prints each world's wall time in both and the largest absolute difference of every numeric field over
the rows (``train_seconds`` aside: a time, not a result); exit status 1 when a non-numeric field or a
number differs by more than ``--tol``. Used to show that a study rerun reproduces the committed one.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys


def leaves(x, path=""):
    """(path, value) of every leaf of a JSON value."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from leaves(v, f"{path}.{k}" if path else k)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from leaves(v, f"{path}[{i}]")
    else:
        yield path, x


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("world")
    ap.add_argument("--tol", type=float, default=1e-9, help="below float32 resolution (6e-8 at 1.0)")
    args = ap.parse_args(argv)
    wa, wb = (json.load(open(p))["worlds"][args.world] for p in (args.a, args.b))
    print(f"world {args.world}: wall time with jobs running {wa['timing']['busy_s'] / 60:.1f} min in A, "
          f"{wb['timing']['busy_s'] / 60:.1f} min in B")
    rows = lambda w: {(r["config"], r["method"]): {k: v for k, v in r.items() if k != "train_seconds"} for r in w["rows"]}
    ra, rb = rows(wa), rows(wb)
    if ra.keys() != rb.keys():
        print(f"different rows: {sorted(ra.keys() ^ rb.keys())}")
        return 1
    worst, other = {}, []
    for key in ra:
        la, lb = dict(leaves(ra[key])), dict(leaves(rb[key]))
        for path in la.keys() | lb.keys():
            x, y = la.get(path), lb.get(path)
            if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
                d = 0.0 if x == y or (math.isnan(x) and math.isnan(y)) else abs(x - y)
                field = re.sub(r"\[\d+\]", "", path.split(".")[0])
                worst[field] = max(worst.get(field, 0.0), d)
            elif x != y:
                other.append(f"{key[0]} / {key[1]}: {path} {x!r} vs {y!r}")
    print(f"{len(ra)} rows; largest absolute difference per field:")
    for field, d in sorted(worst.items()):
        print(f"  {field}: {d:.3g}")
    print("non-numeric differences: " + ("; ".join(other) if other else "none"))
    same = not other and all(d <= args.tol for d in worst.values())
    print(f"same study within {args.tol:g}: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
