"""What every later look of predictor v2 writes: its ``lookN_analysis.json`` and ``RESULTS_lookN.md``, and its record
in the package's model file; and which of a plan's added worlds have committed rows (``checks/``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from benchmarks.validity.v2 import report_v2 as v2
from benchmarks.validity.v2.looks import before_look

HERE = Path(__file__).resolve().parent
CHECKS = HERE / "checks"  # worlds the shipped model was checked on after the last look (check_world.py --keep)


def write_look(look: int, a: dict, render) -> dict:
    """A look's ``lookN_analysis.json`` and ``RESULTS_lookN.md`` (rendered from the written JSON); the JSON as read."""
    path = HERE / f"look{look}_analysis.json"
    path.write_text(json.dumps(v2.stats_jsonable(a), indent=1, sort_keys=True) + "\n")
    written = json.loads(path.read_text())
    (HERE / f"RESULTS_look{look}.md").write_text(render(written))
    return written


def added_worlds(plan: dict) -> tuple[list[str], list[str]]:
    """(a later look's plan's added worlds, those with committed rows in ``CHECKS``)."""
    names = [k for k, v in plan["added_worlds"].items() if isinstance(v, dict)]
    return names, [w for w in names if (CHECKS / f"{w}_analysis.json").is_file()]


def publish(look: int, analyse, render, record) -> int:
    """A look's script body: ``analyse`` on the model file as the look read it (``before_look``: what it or a later
    look replaced restored), its analysis and results written, ``record(shipped, analysis)`` on the file as it
    stands written back as the model file, the results printed."""
    shipped = json.loads(v2.SHIPPED.read_text())
    shipped = record(shipped, write_look(look, analyse(before_look(shipped, look)), render))
    v2.SHIPPED.write_text(json.dumps(v2.stats_jsonable(shipped), indent=1, sort_keys=True) + "\n")
    print((HERE / f"RESULTS_look{look}.md").read_text())
    return 0


def record_look(shipped: dict, look: int, entry: dict, outcome: str = "", models: dict | None = None) -> dict:
    """The model file with the look's record ``entry`` (``later_looks.lookN``). A look whose rule was met passes
    ``models`` (tier -> model of ``outcome``): they replace the file's, and the record keeps what they replaced and
    the worlds checked before (``looks.before_look``, ``looks.as_when_checked``: every earlier figure reads the file
    as it then stood); a rerun keeps the record's first ``replaced``."""
    looks = shipped.setdefault("later_looks", {})
    earlier = (looks.get(f"look{look}") or {}).get("replaced")
    looks[f"look{look}"] = entry
    if models is not None:
        entry["replaced"] = earlier or {
            "models": {t: {outcome: shipped["models"][t][outcome]} for t in models},
            "checked_worlds": sorted(p.stem[len("check_"):] for p in HERE.glob("check_*.txt"))}
        for t, m in models.items():
            shipped["models"][t][outcome] = m
    return shipped


def judged_main(look: int, doc: str, argv: list[str] | None, analyse, render, record) -> int:
    """The script body of a look judged once enough new worlds are checked (``report_look17.py``,
    ``report_look18.py``): its analysis and results written, and once ``done``, ``record(shipped, analysis)`` as the
    model file; ``--check`` fails when the committed outputs differ from what the committed rows give."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when the committed outputs differ")
    args = ap.parse_args(argv)
    yaml.safe_load((HERE / f"plan_look{look}.yaml").read_text())  # the plan is there and reads
    a = json.loads(json.dumps(v2.stats_jsonable(analyse())))
    out, md = HERE / f"look{look}_analysis.json", HERE / f"RESULTS_look{look}.md"
    shipped = json.loads(v2.SHIPPED.read_text())
    recorded = json.loads(json.dumps(v2.stats_jsonable(record(json.loads(json.dumps(shipped)), a))))
    if args.check:
        if not out.is_file() or not md.is_file() or md.read_text() != render(a) or (  # the rounded figures
                a["done"] and recorded != shipped):
            print(f"report_look{look}: the committed outputs differ: run it without --check", file=sys.stderr)
            return 1
        return 0
    out.write_text(json.dumps(a, indent=1, sort_keys=True) + "\n")
    md.write_text(render(a))
    if a["done"]:
        v2.SHIPPED.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    print(md.read_text())
    return 0
