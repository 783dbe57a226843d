"""The trust rule: a run directory never enables code (docs/design.md).

A run's ``manifest.json`` (its stored config) is data that may come from anywhere: loading its models
with the ``trust_remote_code`` it names would import whatever Python a received folder points at.
So every command that re-loads models from a stored config (``opsd-diag predict``, ``opsd-train
--from-diagnosis``, the app's Train this) reads it with remote code off, takes the switch from the
user's own ``--trust-remote-code`` flag (default off) instead, and says so in one line when the
stored config asked for it.
"""

from __future__ import annotations

KEY = "trust_remote_code"


def without_code(data, path: str = "") -> tuple[object, list[str]]:
    """(``data`` with every ``trust_remote_code`` set false, the dotted keys that asked for it)."""
    asked: list[str] = []
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            where = f"{path}.{k}" if path else str(k)
            if k == KEY:
                if v is not False and v is not None and v != 0:
                    asked.append(where)
                out[k] = None if v is None else False  # None: a teacher that inherits the student's switch
            else:
                out[k], more = without_code(v, where)
                asked += more
        return out, asked
    if isinstance(data, list):
        out_list = []
        for i, v in enumerate(data):
            item, more = without_code(v, f"{path}[{i}]")
            out_list.append(item)
            asked += more
        return out_list, asked
    return data, asked


def with_code(data: dict, allow: bool) -> dict:
    """A config dict whose every model spec loads remote code exactly when the user allows it."""
    out, _ = without_code(data)
    return _set(out, allow) if allow else out


def _set(data, allow: bool):
    if isinstance(data, dict):
        return {k: (allow if v is not None else None) if k == KEY else _set(v, allow) for k, v in data.items()}
    if isinstance(data, list):
        return [_set(v, allow) for v in data]
    return data


def note(source, asked: list[str], allowed: bool) -> str | None:
    """The one line saying the stored config asked for remote code, and what decides instead."""
    if not asked:
        return None
    keys = ", ".join(asked[:3]) + (f" and {len(asked) - 3} more" if len(asked) > 3 else "")
    if allowed:
        return (f"note: {source} asks for trust_remote_code ({keys}); it is on because you passed "
                "--trust-remote-code, not because the run asked")
    return (f"note: {source} asks for trust_remote_code ({keys}); a run directory never enables code, so it stays "
            "off (pass --trust-remote-code to allow the models' own code)")
