"""A second forgetting exploration (not pre-registered; it chooses nothing by itself), after
explore_forgetting_lookahead.txt found the lookahead's forgetting pass@1 flat where the student is sure of its second
skill: do the two scoring measures added since (``forgetting_ll``: the log-likelihood change of the initial
student's correct forgetting samples under the stepped student; ``forgetting_kl``: KL to the initial student at
their positions; docs/signals.md) predict the realised forgetting better than v2's forgetting model?

Same worlds, forgetting sets and settings as explore_forgetting_lookahead.py (its ``forgetting_rows`` and lookahead
section), rediagnosed with the library as it now stands into a fresh directory. Printed, all fixed before any run:
per world and pooled, the Spearman with the realised d_regression of ``forgetting_ll``, ``forgetting_kl``, the shipped
v2 forgetting prediction and G; and v2's forgetting model refitted as shipped (ridge, alpha 1, its features) with each
of the two as one more feature, and with both: leave one world out over the seven worlds it was fitted on (the
issue's target: pooled Spearman >= 0.7), and fitted on the seven and applied to every other world.

    python benchmarks/validity/v2/explore_forgetting_ll.py --out DIR [--study STUDY ...] [--worlds a,b]
    python benchmarks/validity/v2/explore_forgetting_ll.py --out DIR --keep   # rows: forgetting_lookahead_rows.json
    python benchmarks/validity/v2/explore_forgetting_ll.py --report > explore_forgetting_ll.txt   # from the kept rows

The kept rows (``explore_forgetting_lookahead.keep``: per world and row the three lookahead forgetting columns,
``lookahead_forgetting`` equal to explore_forgetting_lookahead's on every row) let both reports rerun without the
rediagnoses.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.v2 import explore_forgetting_lookahead  # noqa: E402
from benchmarks.validity.v2.explore_forgetting_lookahead import COLUMNS, forgetting_report, keep  # noqa: E402

def report(source: dict[str, list[dict]]) -> int:
    def coefficients(f: list[str], m: dict) -> str:
        extra = ", ".join(f"{n} {c:+.3f}" for n, c in zip(f, m["coef"]) if n in COLUMNS)
        return f"; coefficients {extra}" if extra else ""
    return forgetting_report(source, COLUMNS, lambda b: {"refit": b, **{f"refit+{k}": [*b, k] for k in COLUMNS},
                                                         "refit+both": [*b, *COLUMNS]},
                             (14, 22), "the new columns", coefficients)


def main(argv: list[str] | None = None) -> int:
    return explore_forgetting_lookahead.main(argv, __doc__, report, keep)


if __name__ == "__main__":
    sys.exit(main())
