"""What the pre-registration tests read from git history: when a file was first committed."""

from __future__ import annotations

import subprocess
from pathlib import Path


def first_added(folder: Path, path: str) -> int | None:
    """Commit time of the commit that first added ``path`` (relative to ``folder``); None where it is not committed."""
    out = subprocess.run(["git", "log", "--format=%ct", "--diff-filter=A", "--", path], cwd=folder,
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[-1]) if out else None
