"""A run directory's stored config read from anywhere: a diagnosis reads its config's relative paths (data, models,
adapters) from the directory it runs in, and records that directory in its manifest (``cwd``); a command that reads
the config back elsewhere (``opsd-diag predict``, ``opsd-train --from-diagnosis``, the app's Train) reads them there."""

from __future__ import annotations

import os

from opsd_diag.io import safe


def rebased(stored: dict, cwd) -> dict:
    """``stored`` with each relative path (a ``safe.PATH_KEYS`` value) that the current directory lacks and ``cwd``,
    the directory the diagnosis read it from (its manifest's ``cwd``), holds made absolute there: a run directory
    predicts and trains again from any directory. A hub name or ``self`` is no file there: kept as written."""
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        return stored

    def walk(value, key=None):
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if key in safe.PATH_KEYS and isinstance(value, str) and value and not os.path.isabs(value) \
                and not value.startswith("~"):
            try:
                if not os.path.exists(value) and os.path.exists(there := os.path.join(cwd, value)):
                    return there
            except (OSError, ValueError):  # a name no file system takes: the config's own check says so
                pass
        return value
    return walk(stored)
