"""Each shipped model's fitted range, written into the package's model file from the committed rows it was fitted on.

    python benchmarks/validity/v2/model_range.py [--check]

A prediction from feature values outside the rows a model was fitted on extrapolates: its interval, made of the
study's fold residuals, never saw such rows, and the product says so per row (``prediction.COLUMNS``,
``outside_range``). ``core.predictor.fit`` records that range in every model it fits since; the shipped models were
fitted by ``report_v2.py`` before it did, and the study directory it read is gone. The committed rows of the seven
worlds (``report_look2.load_rows``: each world's analysis and lookahead rows) are those rows: this script checks
that, per tier and outcome, they reproduce the file's stored feature means and SDs (within 1e-6 of each SD; the
lookahead columns were rounded once, by about 1e-9) before it writes ``range`` beside them; every other key stays as
it is. A later look's model fitted on other rows (the sixteenth look's d_pass1, on 44 worlds) carries the range of
its own fit, so this reads the file as that look found it (``looks.before_look``). ``--check``: fail when the file's
ranges are not what it would write.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import before_look  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402


def ranges(shipped: dict) -> dict[str, dict[str, list]]:
    """tier -> outcome -> ``[[min], [max]]`` over the rows the model was fitted on (those with a finite outcome)."""
    rows = look2.load_rows({"worlds": yaml.safe_load(v2.PLAN.read_text())["worlds"]})
    out = {}
    for tier, per in shipped["models"].items():
        out[tier] = {}
        for outcome, m in per.items():
            X = v2.matrix(rows, m["features"])
            X = X[np.isfinite(v2.target(rows, outcome))]
            refit = model.fit(X, np.zeros(len(X)), m["features"], 1.0)  # only its mean and SD are read
            off = np.abs(np.r_[np.subtract(refit["mean"], m["mean"]), np.subtract(refit["sd"], m["sd"])])
            if not np.all(off <= 1e-6 * np.r_[m["sd"], m["sd"]]):  # in units of the feature's SD
                raise SystemExit(f"model_range: the committed rows do not reproduce {tier}/{outcome}'s means and "
                                 f"SDs: {refit['mean']}, {refit['sd']} against {m['mean']}, {m['sd']}")
            out[tier][outcome] = refit["range"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when the model file's ranges are not what it writes")
    args = ap.parse_args(argv)
    shipped = json.loads(v2.SHIPPED.read_text())
    seven = before_look(shipped, 16)  # the models fitted on the seven worlds; the sixteenth look's carry their own
    want = ranges(seven)
    have = {t: {o: m.get("range") for o, m in per.items()} for t, per in seven["models"].items()}
    if args.check:
        if have != want:
            print(f"model_range: the ranges in {v2.SHIPPED} are stale: rerun python "
                  "benchmarks/validity/v2/model_range.py", file=sys.stderr)
            return 1
        return 0
    for tier, per in want.items():
        for outcome, r in per.items():
            if shipped["models"][tier][outcome]["coef"] == seven["models"][tier][outcome]["coef"]:  # not replaced
                shipped["models"][tier][outcome]["range"] = r
    v2.SHIPPED.write_text(json.dumps(v2.stats_jsonable(shipped), indent=1, sort_keys=True) + "\n")
    print(json.dumps(want["v2"]["d_pass1"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
