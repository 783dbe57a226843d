"""One line for a pydantic validation error of the config: the source, the dotted key and the fix.

The strict types of ``config.spec`` refuse YAML 1.1 booleans for numbers and numbers for names; the
message then says what YAML read and how to quote it.
"""

from __future__ import annotations

from pydantic import ValidationError


def format_error(e: ValidationError, source: str, section: str = "", doc: str = "docs/config.md") -> str:
    """One line: the source, the dotted key (under ``section`` when one section was validated) and the fix
    (``doc``: the reference page an unknown key is checked against)."""
    err = e.errors()[0]
    loc = tuple(str(p) for p in (*section.split(".")[:bool(section)], *err["loc"]))
    key = ".".join(loc)
    msg = err["msg"].removeprefix("Value error, ")
    value = err.get("input")
    if err["type"] in ("int_type", "float_type") and isinstance(value, bool):
        msg = (f"{msg}, got the boolean {str(value).lower()} (YAML reads yes/no/on/off/true/false as booleans): "
               "write a number")
    elif err["type"] == "string_type" and isinstance(value, (bool, int, float)):
        msg = (f"{msg}, got the {type(value).__name__} {value!r} (YAML reads yes/no/on/off, true/false and "
               "numbers such as 1.10 as non-strings): put the value in quotes as you wrote it, e.g. "
               "name: \"no\" or model: \"1.10\"")
    elif err["type"] == "extra_forbidden":
        msg = f"unknown key (check its spelling against {doc})"
    elif err["type"] == "string_pattern_mismatch" and loc[-1:] == ("name",):
        msg = f"{err['input']!r}: a name may hold only letters, digits, '_', '-' and '.'"
    elif err["type"] == "literal_error" and loc[-1:] == ("method",):
        methods = err["ctx"]["expected"].replace("'", "")  # pydantic's "'opd', 'jsd' or 'sft'"
        msg = f"unknown method {err['input']!r}: use one of {methods}"
    more = f" (and {len(e.errors()) - 1} more problem(s))" if len(e.errors()) > 1 else ""
    return f"{source}: {key}: {msg}{more}" if key else f"{source}: {msg}{more}"
