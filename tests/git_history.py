"""What the pre-registration tests read from git history: when a file was first committed."""

from __future__ import annotations

import subprocess
from pathlib import Path


def first_added(folder: Path, path: str) -> int | None:
    """Commit time of the commit that first added ``path`` (relative to ``folder``); None where it is not committed."""
    out = subprocess.run(["git", "log", "--format=%ct", "--diff-filter=A", "--", path], cwd=folder,
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[-1]) if out else None


def assert_plan_first(folder: Path, look: int, worlds=(), worlds_dir: Path | None = None) -> int:
    """A look's ``plan_lookN.yaml`` was committed, and before its ``lookN_analysis.json`` and each added world's build
    (``worlds_dir/W/models``) where those are committed; returns the plan's commit time."""
    plan, analysis = first_added(folder, f"plan_look{look}.yaml"), first_added(folder, f"look{look}_analysis.json")
    assert plan is not None and (analysis is None or plan <= analysis)
    for w in worlds:
        built = first_added(worlds_dir, f"{w}/models")
        assert built is None or plan <= built, w
    return plan
