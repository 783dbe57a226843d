"""Regenerate the parts of docs/ that are read off the code, so the docs cannot drift from it.

    python docs/generate.py           # rewrite the generated parts
    python docs/generate.py --check   # exit 1 and name the stale files (tests/test_docs.py runs this)

Generated:

- ``docs/config.md`` entirely: every key of the YAML config, walked from the pydantic models of
  ``opsd_diag/config/spec.py`` (``model_fields``: annotation, default, constraints, description), and
  what a training section inherits, found by probing ``opsd_diag.config.training.resolve_training``;
- ``docs/worlds.md`` entirely: every key of a world spec, walked the same way from ``opsd_diag/zoo/world.py``;
- the blocks between ``<!-- generated: NAME -->`` and ``<!-- end generated -->`` in the other pages:
  the per-token columns (``opsd_diag.schema``), the verdict rule (``opsd_diag.core.verdict``), predictor
  v2 as shipped (``opsd_diag/data/predictor_v2.json``) and its table's columns (``opsd_diag.prediction``), the
  figure captions (``opsd_diag.report.figures``), the training methods, the signal -> method table of
  ``--from-diagnosis`` and the metrics keys (``trainer``), and the module map (each module's docstring).

The pages are built by ``docs/gen_config.py``, the blocks by ``docs/gen_blocks.py``; everything else in docs/
is written by hand.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "docs"):  # `python docs/generate.py` from anywhere; its two table modules sit beside it
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from gen_blocks import (columns_block, features_block, figures_block, from_diagnosis_block, levers_block,  # noqa: E402
                        methods_block, metrics_block, modules_block, prediction_columns_block, predictor_block,
                        schedule_block, verdict_block)
from gen_config import config_md, worlds_md  # noqa: E402

BEGIN = "<!-- generated: {} -->"
END = "<!-- end generated -->"


# ------------------------------------------------------------------------------------ files

BLOCKS = {
    "docs/signals.md": {"columns": columns_block, "features": features_block},
    "docs/verdict.md": {"rule": verdict_block, "predictor-v2": predictor_block,
                        "prediction-columns": prediction_columns_block},
    "docs/app.md": {"figures": figures_block},
    "docs/training.md": {"methods": methods_block, "from-diagnosis": from_diagnosis_block,
                         "metrics": metrics_block, "levers": levers_block,
                         "schedule": schedule_block},
    "docs/design.md": {"modules": modules_block},
}


def fill(text: str, blocks: dict, name: str) -> str:
    """``text`` with each ``<!-- generated: NAME -->`` ... ``<!-- end generated -->`` block rewritten."""
    for block, make in blocks.items():
        begin = BEGIN.format(block)
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(END), re.DOTALL)
        if len(pattern.findall(text)) != 1:
            raise SystemExit(f"docs/generate.py: {name} needs exactly one '{begin}' ... '{END}' block")
        body = make()
        text = pattern.sub(lambda _, begin=begin, body=body: f"{begin}\n{body}\n{END}", text)
    return text


def expected() -> dict[str, str]:
    """Path (relative to the repository) -> the content it should have."""
    out = {"docs/config.md": config_md(), "docs/worlds.md": worlds_md()}
    for name, blocks in BLOCKS.items():
        path = ROOT / name
        if not path.is_file():
            raise SystemExit(f"docs/generate.py: {name} is missing")
        out[name] = fill(path.read_text(encoding="utf-8"), blocks, name)
    return out


def main(check: bool = False) -> int:
    """Write the generated parts (``check``: only compare); 1 when a file is stale (check) or broken."""
    try:
        want = expected()
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 1
    stale = [name for name, text in want.items()
             if not (ROOT / name).is_file() or (ROOT / name).read_text(encoding="utf-8") != text]
    if check:
        if stale:
            print("stale (run python docs/generate.py): " + ", ".join(stale), file=sys.stderr)
            return 1
        return 0
    for name in stale:
        (ROOT / name).write_text(want[name], encoding="utf-8")
        print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 listing the stale files; write nothing")
    sys.exit(main(check=ap.parse_args().check))
