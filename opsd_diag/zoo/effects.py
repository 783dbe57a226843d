"""A world's pre-declared effect checks (the spec's ``expect``), evaluated on its build report.

A world is built to show one effect (``capacity``: a large accuracy gap the student cannot absorb).
Its spec says beforehand which numbers of the model card must show it, so "the card shows the
effect" is a rule written before the build, not a reading of the card afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("accuracy", "pass@1", "pass@4", "second_skill", "style", "probe")


@dataclass(frozen=True)
class Outcome:
    what: str
    expression: str   # e.g. "accuracy[student + full solution] - accuracy[student]"
    value: float | None  # None: a quantity the report does not hold
    bound: str        # e.g. ">= 0.3"
    holds: bool


def quantity(report, name: str) -> float | None:
    """``KIND:ROW`` of a build report over all levels (``probe``: the one probe row); None if absent."""
    kind, _, row = name.partition(":")
    if kind == "accuracy":
        return report.accuracy.get(row, {}).get("all")
    if kind in ("pass@1", "pass@4"):
        return report.pass_k.get(row, {}).get(kind)
    if kind == "second_skill":
        return report.second_skill.get(row)
    if kind == "style":
        return report.style.get(row)
    if kind == "probe":
        return next(iter(report.probe.values()), {}).get("all")
    raise ValueError(f"unknown quantity kind {kind!r}: use one of {', '.join(KINDS)}")


def check(report, expectations) -> list[Outcome]:
    """Each expectation of the spec against the report's numbers."""
    out = []
    for e in expectations:
        a = quantity(report, e.value)
        b = quantity(report, e.minus) if e.minus else 0.0
        value = None if a is None or b is None else a - b
        text = f"{_term(e.value)} - {_term(e.minus)}" if e.minus else _term(e.value)
        bounds = [(">=", e.at_least), ("<=", e.at_most)]
        holds = value is not None and all(
            (value >= x - 1e-9) if op == ">=" else (value <= x + 1e-9) for op, x in bounds if x is not None)
        out.append(Outcome(e.what, text, value, " and ".join(f"{op} {x:g}" for op, x in bounds if x is not None),
                           holds))
    return out


def _term(name: str) -> str:
    kind, _, row = name.partition(":")
    return f"{kind}[{row}]" if row else kind


def markdown(outcomes: list[Outcome]) -> str:
    """The card's effect table: what was declared, what was measured, whether it holds."""
    rows = "\n".join(f"| {o.what} | `{o.expression}` | {'n/a' if o.value is None else f'{o.value:+.2f}'} | "
                     f"{o.bound} | {'yes' if o.holds else '**no**'} |" for o in outcomes)
    verdict = ("Every declared check holds: the card shows the effect this world was built for."
               if all(o.holds for o in outcomes) else
               "**At least one declared check fails: this build does not show the effect it was built for.**")
    return ("Effect check (declared in the spec's `expect` before the build; all levels):\n\n"
            "| check | quantity | measured | required | holds |\n|---|---|---|---|---|\n" + rows + "\n\n" + verdict)
