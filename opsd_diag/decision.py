"""The decision a diagnosis supports: which (config, signal) to train, how sure, and what the cheap
baselines and the validity study say about such a call. Pure functions of a run's ``Summary`` (and
of the committed validity analysis), so the app's decision panel shows nothing it computes itself.

- recommended: the best-ranked (config, signal) whose verdict is *helps* (the ranking puts helps first)
  and that a training method can train; none when no such row helps.
- runner-up: the best-ranked row of *another* config. The signals of one config share its teacher
  advantage, so their scores often tie: the ranking is mostly a choice of config.
- separable: the two 95% intervals of the score (the first-order gain, a bootstrap over prompts) do not
  overlap. Non-overlap of two marginal intervals is a conservative check, not a paired test.
- baselines: the config with the largest accuracy gap G (teacher with its context minus the student)
  and the one with the largest teacher advantage A_T (the split the verdict used).
- validity: what the pre-registered studies found for verdicts like this one and for the score against
  the best cheap baseline, as the package's model file carries them (its ``studies`` block, written by
  ``benchmarks/validity/v2/report_v2.py`` from ``benchmarks/validity/validity_analysis.json``, the bundled
  toy world, and ``benchmarks/validity/worlds/worlds_analysis.json``, the outcome worlds pooled), so an
  installed wheel quotes them too; the study scripts read an analysis file by its path.

Predictor v2's decision (what the app's panel leads with) is ``opsd_diag.prediction``; this module is the v1
rule's, shown as secondary evidence.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from opsd_diag import prediction
from opsd_diag.core.verdict import MIN_PROMPTS
from opsd_diag.summary import CI, Summary

STUDIES = ("toy_world", "outcome_worlds")  # the model file's ``studies`` keys (the two analyses' figures)


@dataclass(frozen=True)
class Row:
    rank: int
    config: str
    signal: str
    verdict: str
    score: float
    lo: float  # the score's 95% interval (NaN: none)
    hi: float

    def interval(self) -> str:
        if math.isnan(self.score):
            return "n/a"
        if math.isnan(self.lo):
            return f"{self.score:+.3f}"
        return f"{self.score:+.3f} [{self.lo:+.3f}, {self.hi:+.3f}]"


@dataclass(frozen=True)
class Decision:
    rows: list[Row]  # ranked
    recommended: Row | None  # the best-ranked helps row
    leader: Row | None  # the recommended row, else the best-ranked one (what the runner-up is compared with)
    runner_up: Row | None  # the best row of another config than the leader
    separable: bool | None  # None: no runner-up, or an interval is missing
    tied_within: dict[str, float]  # config -> max - min score over its signals (the spread of a tie)
    by_accuracy_gap: tuple[str, float] | None  # (config, G estimate)
    by_advantage: tuple[str, float] | None  # (config, A_T estimate)


def _num(x) -> float:
    return math.nan if x is None else float(x)


def _gain(summary: Summary, config: str, signal: str) -> CI | None:
    node = summary.ideal.configs.get(config) if summary.ideal else None
    return (node.gain.get(signal) or {}).get("all") if node else None


def advantage(summary: Summary, config: str) -> CI | None:
    """A_T as the verdict used it: the incorrect rollouts' nodes when they cover enough prompts, else all."""
    node = summary.ideal.configs.get(config) if summary.ideal else None
    if node is None:
        return None
    inc = node.teacher_advantage.get("incorrect")
    return inc if inc is not None and inc.n_prompts >= MIN_PROMPTS else node.teacher_advantage.get("all")


def _best(values: dict[str, float]) -> tuple[str, float] | None:
    known = {k: v for k, v in values.items() if not math.isnan(v)}
    return max(known.items(), key=lambda kv: kv[1]) if known else None


def decide(summary: Summary, trainable=None) -> Decision:
    """The decision of a run; ``trainable(config, signal)`` (default: every row) says which rows a method can
    train: only those are recommended (the panel offers to train what it recommends)."""
    trainable = trainable or (lambda config, signal: True)
    rows = []
    for i, r in enumerate(summary.ranking):
        g = _gain(summary, r.config, r.signal)
        rows.append(Row(i + 1, r.config, r.signal, r.verdict, _num(r.score), _num(g.lo if g else None),
                        _num(g.hi if g else None)))
    rec = next((r for r in rows if r.verdict == "helps" and trainable(r.config, r.signal)), None)
    lead = rec or next((r for r in rows if trainable(r.config, r.signal)), rows[0] if rows else None)
    runner = next((r for r in rows if lead is not None and r.config != lead.config), None)
    separable = None
    if lead is not None and runner is not None and not math.isnan(lead.lo) and not math.isnan(runner.hi):
        separable = bool(lead.lo > runner.hi)
    tied = {}
    for r in rows:
        if not math.isnan(r.score):
            lo, hi = tied.get(r.config, (r.score, r.score))
            tied[r.config] = (min(lo, r.score), max(hi, r.score))
    gap = {c: _num(e.teacher_minus_student_accuracy.estimate if e.teacher_minus_student_accuracy else None)
           for c, e in summary.configs.items()}
    adv = {c: _num(a.estimate if a else None) for c in summary.configs for a in [advantage(summary, c)]}
    return Decision(rows, rec, lead, runner, separable, {c: hi - lo for c, (lo, hi) in tied.items()}, _best(gap),
                    _best(adv))


def studies() -> dict[str, dict | None]:
    """The v1 studies' findings the panel quotes (``STUDIES``), from the package's model file; None for a study
    the installation does not carry."""
    cal = prediction.load()
    return {k: (cal.studies.get(k) if cal else None) for k in STUDIES}


def validity(path: str | Path | None = None) -> dict | None:
    """A study's findings the panel quotes: the toy world's from the package's model file (``path`` None), or
    those of the analysis file ``path`` (the study scripts); None when they are not there. A worlds analysis
    (``worlds_analysis.json``) is quoted by its pooled block, which has the same fields."""
    if path is None:
        return studies()["toy_world"]
    try:
        d = json.loads(Path(path).read_text())
        where = "trained rows of the bundled toy world"
        if "pooled" in d:
            d = d["pooled"]
            where = f"trained rows of {len(d['worlds'])} outcome worlds pooled: {', '.join(d['worlds'])}"
        comp, acc = d["comparison"], d["verdict_accuracy"]
        advantage = d["spearman"].get("teacher_advantage")
        if advantage and comp.get("outcome") in advantage:  # the worlds give one coefficient per outcome
            advantage = advantage[comp["outcome"]]
        n_rows = comp["primary_rho"].get("n_rows")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return {"n_rows": n_rows, "where": where, "score_rho": comp["primary_rho"],
            "baseline": comp["best_baseline"], "baseline_rho": comp["best_baseline_rho"],
            "difference": comp["difference"], "better": bool(comp["better"]),
            "advantage_rho": advantage, "accuracy": acc, "by_verdict": acc.get("table", {})}


OUTCOME_ORDER = ("improves", "no clear change", "degrades")  # realised classes, as the studies list them


def _order(outcome: str) -> tuple[int, str]:
    """The realised classes in the studies' order (the package's copy of a study has its keys sorted)."""
    return (OUTCOME_ORDER.index(outcome) if outcome in OUTCOME_ORDER else len(OUTCOME_ORDER), outcome)


def _rho(ci: dict | None) -> str:
    return "n/a" if not ci else f"{ci['estimate']:+.2f} [{ci['lo']:+.2f}, {ci['hi']:+.2f}]"


def validity_text(v: dict | None, verdict: str | None) -> str:
    """Two sentences on what one study found: for verdicts like ``verdict``, and for the score as a ranking."""
    if v is None:
        return "A validity study's results (benchmarks/validity/) are not in this installation's model file."
    out = []
    table = v["by_verdict"].get(verdict) if verdict else None
    if table:
        n = sum(table.values())
        out.append(f"In a pre-registered study ({v['n_rows']} {v['where']}), "
                   f"{n} {verdict} verdicts: " + ", ".join(f"{k} {table[k]}" for k in sorted(table, key=_order)) + ".")
    better = "better than" if v["better"] else "no better than"
    out.append(f"As a ranking, the score did {better} the cheap baseline {v['baseline']}: Spearman with the realised "
               f"pass@1 change {_rho(v['score_rho'])} vs {_rho(v['baseline_rho'])} (A_T alone: "
               f"{_rho(v['advantage_rho'])}).")
    return " ".join(out)


def text(d: Decision) -> str:
    """The v1 rule's call as ``opsd-diag report`` prints it, under predictor v2's decision (the app's folded panel
    in words): the row it picks, the runner-up and whether the two separate, what the cheap baselines pick, and
    what the validity studies found. Called its pick, not a recommendation: the report recommends one row, v2's."""
    rec = d.recommended
    lines = ["\ndecision (v1 rule, secondary evidence):"]
    if rec is None:
        counts = {v: sum(r.verdict == v for r in d.rows) for v in ("unclear", "hurts")}
        lines.append(f"no (config, signal) is predicted to help: {counts['unclear']} unclear, {counts['hurts']} hurts")
    else:
        lines.append(f"the v1 rule's pick: {rec.config} / {rec.signal}, helps, score {rec.interval()}")
        r = d.runner_up
        sep = {True: "separable (the 95% intervals do not overlap)", False: "not separable (the 95% intervals overlap)",
               None: "separability unknown (an interval is missing)"}[d.separable]
        lines.append("runner-up: none (no other config)" if r is None else
                     f"runner-up (best of another config): {r.config} / {r.signal}, {r.verdict}, score {r.interval()}: "
                     f"{sep}")
    base = [f"largest {name}: {c} ({v:+.3f})" for name, pick in (("accuracy gap G", d.by_accuracy_gap),
                                                                 ("teacher advantage A_T", d.by_advantage))
            if pick for c, v in [pick]]
    if base:
        lines.append("cheap baselines pick: " + "; ".join(base))
    lines += [validity_text(study, rec.verdict if rec else None) for study in studies().values()]
    return "\n".join(lines)
