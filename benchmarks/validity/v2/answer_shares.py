"""Each checked world's answer-only failure check, per config: the share of its JSD on the final answer's tokens and
those tokens' share (``core.failure_checks.answer_signal``'s numbers), kept in answer_shares.json.

The check reads a diagnosis' tokens, which a world's committed rows do not hold, so it is measured where the study
ran: ``check_world.py --keep`` stores it for each world it checks, and ``--measure ROOT`` stores it for every study
``ROOT/study-W`` of a checked world. A world's ``self_other`` is the ``self_full`` of its ``other_solution``
diagnosis (the next problem's solution shown), as the study's rows take it.

    python benchmarks/validity/v2/answer_shares.py --measure /work/runs
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

HERE = Path(__file__).resolve().parent
FILE = HERE / "answer_shares.json"


def measure(study: Path, world: str) -> dict | None:
    """Config -> {answer_share, answer_tokens} of ``world``'s diagnoses under the study directory ``study``; None
    when the study holds no finished diagnosis of it."""
    from opsd_diag.core.failure_checks import ANSWER_CHECK
    from opsd_diag.run import Run

    diag = study / world / "diag"
    if not (diag / "main" / "manifest.json").is_file():
        return None
    out = {}
    for name, keep in (("main", None), ("other_solution", {"self_full": "self_other"})):
        if not (diag / name / "manifest.json").is_file():
            continue
        c = next(c for c in Run.load(diag / name).failure_checks() if c.name == ANSWER_CHECK)
        for config, share in c.numbers.get("answer_share", {}).items():
            if keep is None or config in keep:
                out[(keep or {}).get(config, config)] = {"answer_share": share,
                                                         "answer_tokens": c.numbers["answer_tokens"][config]}
    return out


def flagged(shares: dict) -> set[str]:
    """The configs of one world's ``shares`` that the answer-only check flags (its constants as the package has them)."""
    from opsd_diag.core import failure_checks as fc

    return {c for c, x in shares.items() if x["answer_share"] > fc.ANSWER_SIGNAL_MAX
            and x["answer_tokens"] <= fc.ANSWER_TOKENS_MAX}


def load() -> dict:
    return json.loads(FILE.read_text()) if FILE.is_file() else {}


def store(world: str, shares: dict) -> None:
    FILE.write_text(json.dumps({**load(), world: shares}, indent=1, sort_keys=True) + "\n")


def main() -> int:
    from benchmarks.validity.v2 import report_checks as rc

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", type=Path, required=True, help="the folder holding the study-W directories")
    args = ap.parse_args()
    for study in sorted(args.measure.glob("study-*")):
        w = study.name.removeprefix("study-")
        if rc.status(w) == "checked" and (shares := measure(study, w)) is not None:
            store(w, shares)
    return 0


if __name__ == "__main__":
    sys.exit(main())
