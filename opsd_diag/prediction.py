"""Predictor v2 applied to a run: per (teacher config, training method) the predicted held-out Δpass@1 with a
95% interval and its verdict, the predicted drift, forgetting and Δpass@4, a collapse flag, and the features
behind the prediction ("why").

The models are the ridge regressions of ``core.predictor`` that the pre-registered validity study fitted over seven
outcome worlds (benchmarks/validity/v2/), the gain model since the sixteenth look with G's positive part times the
teacher's distance from the student (``core.predictor.derived``) and fitted over 44 worlds, read from the model file
(``model_file``: the shipped one or a calibration). The file also says what the study's ship rule chose
(``choice``): ``v2`` (with the lookahead where a run has one), ``v2_no_lookahead``, or ``accuracy_gap``, in which
case G gates the recommendation (only a row with G > 0 is recommended), because v2 lost to it in the study and the
product must never recommend less well than a number it shows, and the file's ``method_order`` ranks (since the
eighth look: configurations by v2's mean predicted gain, which ranked the worlds built after the study better than
G). A row without a lookahead result gets the ``v2_no_lookahead`` tier, never the lookahead tier with every
lookahead feature imputed. Pure functions of a ``Summary`` and the model file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from opsd_diag.core import predictor
from opsd_diag.errors import OpsdError
from opsd_diag.io import safe
from opsd_diag.model_file import OUTCOMES, SHIPPED, TIERS, Calibration, parse
from opsd_diag.summary import CI, Summary

MODEL_FILE = "a predictor_v2.json written by benchmarks/validity/v2/report_v2.py or `opsd-diag scoreboard --fit`"
MAX_BYTES = 16 << 20  # a model file is tens of KB (a calibration lists its runs: a few hundred bytes each)
EXTERNAL_METHODS = ("opd", "jsd", "opd2", "exopd")  # a teacher model (opd2 only with a base)
SELF_METHODS = ("opsd_opd", "opsd_jsd")  # the student shown a context
LOSS = {"opd": "opd", "jsd": "jsd", "opd2": "opd2", "exopd": "exopd", "opsd_opd": "opd", "opsd_jsd": "jsd"}
SIGNAL = {"opd": "r_opd", "jsd": "jsd", "opd2": "a_d2", "exopd": "a_ex", "opsd_opd": "r_opd", "opsd_jsd": "jsd"}
LOOKAHEAD = {"lookahead_dv": "dv", "lookahead_dll": "dll", "lookahead_kl": "kl"}
N_WHY = 3  # features named in a row's "why"

COLUMNS = {  # the prediction table (``Predictions.frame``, ``Run.predictions``), documented in docs/verdict.md
    "rank": "1 = best: by predicted gain, or, when the study chose G, by the model file's ranking rule "
            "(core.predictor.ORDER_TEXT: as shipped, configs by v2's mean predicted gain, then the method order)",
    "config": "teacher config",
    "method": "training method (opd, jsd, opd2, exopd with a teacher model; opsd_opd, opsd_jsd with a self-teacher)",
    "signal": "the diagnosed signal the method trains on (what `opsd-train --from-diagnosis --signal` takes)",
    "tier": "the model that ran: v2 (with the lookahead) or v2_no_lookahead (no lookahead result for this row)",
    "predicted_gain": "predicted change of held-out pass@1 after training",
    "lo": "lower end of its 95% interval (prediction + the study's 2.5% out-of-fold residual quantile)",
    "hi": "upper end (prediction + the 97.5% residual quantile)",
    "verdict": "helps if lo > delta, hurts if hi < -delta, else unclear (delta from the model file)",
    "drift": "predicted KL(trained || initial student) per token on held-out samples (the shipped model predicts ln "
             "KL, predictor v2's thirteenth look; a raw-KL model, as in a calibration file written before it, is "
             "floored at 0)",
    "drift_lo": "lower end of the drift's 95% interval (the study's 2.5% residual quantile, on the scale the model was "
                "fitted on: a factor for a log-KL model)",
    "drift_hi": "upper end (the 97.5% residual quantile)",
    "forgetting": "predicted change of accuracy on the frozen regression set (negative: forgetting)",
    "pass4": "predicted change of held-out pass@4",
    "collapse": "predicted gain > 0 and predicted pass4 < 0 (pass@1 up, diversity down)",
    "accuracy_gap": "G: teacher with its context minus student accuracy (the baseline v2 is judged against)",
    "why": "the features with the largest contributions to predicted_gain, signed",
    "imputed": "features missing for this row, set to the study's mean (contribute 0)",
    "outside_range": "features outside the range of the rows the model was fitted on: the prediction extrapolates, "
                     "and its interval (the study's residuals) never saw such a row",
    "calibration": "shipped (the package's model file) or the calibration file's path",
}
PANEL_TEXT = ("caution", "effects", "why", "ranking", "record", "tiers", "calibration")  # the paragraphs, in order
JOINED = ("rank", "method", "tier", "predicted_gain", "lo", "hi", "verdict", "drift", "forgetting", "pass4", "collapse")
WORDS = {"accuracy_gap": "accuracy gap G", "lookahead_dv": "lookahead success change",
         "lookahead_dll": "lookahead log-likelihood gap", "lookahead_kl": "lookahead KL", "teachability": "teachability",
         "mean_jsd": "mean JSD", "is_jsd": "JSD loss", "g_far_teach": "max(G, 0) x (1 - teachability)",
         "g_far_jsd": "max(G, 0) x mean JSD"}


def _shipped_text() -> str | None:
    try:
        return (resources.files("opsd_diag") / "data" / SHIPPED).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None


def load(calibration: str | Path | None = None) -> Calibration | None:
    """The shipped model file (None when this installation has none), or the calibration file ``calibration``
    of the same format (a missing or malformed one is an OpsdError naming the fix)."""
    if calibration is None:
        text, source = _shipped_text(), "shipped"
        if text is None:
            return None
    else:
        source = str(calibration)
        try:  # bounded, never blocking on a FIFO: a run's config may name any path (ideal.calibration)
            text = safe.read_bytes(calibration, MAX_BYTES, follow=True).decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise OpsdError(f"cannot read the calibration file {calibration} ({getattr(e, 'strerror', None) or e}): "
                            f"give {MODEL_FILE}") from None
    try:
        return parse(safe.parse_json(text, source), source)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise OpsdError(f"the calibration {source} is not a predictor v2 model file ({e}): give {MODEL_FILE}") \
            from None


def _num(x) -> float:
    return math.nan if x is None else float(x)


def _est(ci: CI | None) -> float:
    return math.nan if ci is None else ci.value()


def features(summary: Summary, config: str, method: str) -> dict[str, float]:
    """The diagnosis columns of (config, method) the models take (NaN: missing)."""
    entry = summary.configs[config]
    cols = entry.overall.columns
    la = summary.lookahead.result(config, LOSS[method]) if summary.lookahead else None
    out = {"accuracy_gap": _est(entry.teacher_minus_student_accuracy),
           "teachability": _num(cols["teachability"].mean) if "teachability" in cols else math.nan,
           "mean_jsd": _num(cols["jsd"].mean) if "jsd" in cols else math.nan,
           "is_jsd": predictor.LOSS_KIND[method]}
    out.update({name: _est(getattr(la, key)) if la else math.nan for name, key in LOOKAHEAD.items()})
    return {**out, **predictor.derived(out["accuracy_gap"], out["teachability"], out["mean_jsd"])}


def methods(is_self: bool, has_base: bool) -> tuple[str, ...]:
    """The training methods a teacher config can be trained with."""
    return SELF_METHODS if is_self else tuple(m for m in EXTERNAL_METHODS if m != "opd2" or has_base)


def tier_for(cal: Calibration, has_lookahead: bool) -> str:
    """The tier the study chose (v2 when it chose G), v2_no_lookahead where the row has no lookahead result."""
    preferred = cal.choice if cal.choice in TIERS else "v2"
    return "v2_no_lookahead" if preferred == "v2" and not has_lookahead else preferred


@dataclass(frozen=True)
class Row:
    rank: int
    config: str
    method: str
    tier: str
    gain: float  # predicted Δpass@1
    lo: float
    hi: float
    verdict: str
    drift: float
    drift_lo: float  # the drift's 95% interval (a factor either way, for the shipped log-KL model)
    drift_hi: float
    forgetting: float
    pass4: float
    accuracy_gap: float
    contributions: tuple[tuple[str, float, float], ...]  # (feature, value, contribution), largest |contribution| first
    intercept: float
    imputed: tuple[str, ...]
    outside: tuple[str, ...]  # features beyond the model's fitted range (core.predictor.outside)

    @property
    def signal(self) -> str:
        return SIGNAL[self.method]

    @property
    def collapse(self) -> bool:
        return bool(self.gain > 0 and self.pass4 < 0)

    def interval(self) -> str:
        if math.isnan(self.gain):
            return "n/a"
        band = "" if math.isnan(self.lo) else f" [{self.lo:+.3f}, {self.hi:+.3f}]"
        return f"{self.gain:+.3f}{band}"

    def why(self, n: int = N_WHY) -> str:
        top = [c for c in self.contributions if c[2] != 0][:n]
        text = "; ".join(f"{f} {v:+.3f} adds {c:+.3f}" for f, v, c in top) or "every feature at the study's mean"
        return text + "".join(f" ({k}: {', '.join(v)})" for k, v in (("imputed", self.imputed),
                                                                     ("outside the study's range", self.outside)) if v)


def _row(summary: Summary, cal: Calibration, config: str, method: str) -> Row:
    x = features(summary, config, method)
    has_la = not all(math.isnan(x[f]) for f in LOOKAHEAD)
    tier = tier_for(cal, has_la)
    X = {o: np.array([[x[f] for f in cal.models[tier][o]["features"]]], dtype=np.float64) for o in OUTCOMES}  # [1, f]
    out = {o: [float(v[0]) for v in predictor.interval(cal.models[tier][o], X[o])] for o in OUTCOMES}  # pred, lo, hi
    m = cal.models[tier]["d_pass1"]
    contrib = predictor.contributions(m, X["d_pass1"])[0]  # [f]
    order = sorted(range(len(contrib)), key=lambda i: -abs(contrib[i]))
    gain, lo, hi = out["d_pass1"]
    # a raw-KL model (an older calibration file's) can go below 0; a KL cannot (NaN stays NaN)
    kl, kl_lo, kl_hi = (float(np.maximum(v, 0.0)) for v in out["kl_to_initial"])
    return Row(0, config, method, tier, gain, lo, hi, predictor.verdict(lo, hi, cal.delta), kl, kl_lo, kl_hi,
               out["d_regression"][0], out["d_pass4"][0], x["accuracy_gap"],
               tuple((m["features"][i], x[m["features"][i]], float(contrib[i])) for i in order), float(m["intercept"]),
               tuple(f for f in m["features"] if math.isnan(x[f])),
               tuple(f for f, out in zip(m["features"], predictor.outside(m, X["d_pass1"])[0]) if out))


def _key(v: float) -> float:
    return -v if not math.isnan(v) else math.inf  # highest first, missing last


@dataclass(frozen=True)
class Predictions:
    rows: list[Row]  # ranked
    calibration: Calibration
    ranked_by: str  # "predicted_gain" or "accuracy_gap"
    note: str = ""  # the run's lookahead settings differ from the study's (its lookahead features are out of range)
    cautions: dict[str, str] = field(default_factory=dict)  # config -> a failure check that fired for it

    def frame(self) -> pd.DataFrame:
        """One row per (config, method), ranked; columns: ``COLUMNS``."""
        recs = [{"rank": r.rank, "config": r.config, "method": r.method, "signal": r.signal, "tier": r.tier,
                 "predicted_gain": r.gain, "lo": r.lo, "hi": r.hi, "verdict": r.verdict, "drift": r.drift,
                 "drift_lo": r.drift_lo, "drift_hi": r.drift_hi,
                 "forgetting": r.forgetting, "pass4": r.pass4, "collapse": r.collapse,
                 "accuracy_gap": r.accuracy_gap, "why": r.why(), "imputed": ", ".join(r.imputed),
                 "outside_range": ", ".join(r.outside),
                 "calibration": self.calibration.source} for r in self.rows]
        return pd.DataFrame(recs, columns=list(COLUMNS))

    def row(self, config: str, method: str) -> Row | None:
        return next((r for r in self.rows if (r.config, r.method) == (config, method)), None)

    def recommended(self, trainable=None, guarded: bool = True) -> Row | None:
        """The best-ranked trainable row that the ranking supports: verdict helps (v2), or G > 0 (G ranks); under
        the model file's answer_guard (the seventeenth look) not of a config the answer-only check flags, unless
        ``guarded`` is False."""
        ok = trainable or (lambda config, signal: True)
        good = (lambda r: r.accuracy_gap > 0) if self.ranked_by == "accuracy_gap" else (lambda r: r.verdict == "helps")
        skip = self.cautions if guarded and self.calibration.recommendation == "answer_guard" else {}
        return next((r for r in self.rows if good(r) and ok(r.config, r.signal) and r.config not in skip), None)


def predict(summary: Summary, self_teachers=(), has_base: bool = False, calibration: str | Path | None = None,
            cautions: dict[str, str] | None = None) -> Predictions | None:
    """Every (config, method) of ``summary`` predicted and ranked; ``self_teachers``: the configs that are the
    student shown a context; ``cautions``: the failure checks that fired per config (``checks.cautions``); None when
    there is no model file (an installation without one)."""
    cal = load(calibration)
    if cal is None:
        return None
    self_teachers = set(self_teachers)
    rows = [_row(summary, cal, c, m) for c in summary.configs for m in methods(c in self_teachers, has_base)]
    by_gap = cal.choice == "accuracy_gap"
    cg = predictor.config_gains([r.config for r in rows], [r.gain for r in rows])  # v2_config's order
    keys = [predictor.gap_rank_key(r.method, r.accuracy_gap, r.gain, cal.method_order, cal.sampled_scale, c)
            if by_gap else _key(r.gain) for r, c in zip(rows, cg)]
    rows = [replace(rows[j], rank=i + 1) for i, j in enumerate(sorted(range(len(rows)), key=keys.__getitem__))]
    return Predictions(rows, cal, "accuracy_gap" if by_gap else "predicted_gain", settings_note(summary, cal),
                       dict(cautions or {}))


def settings_note(summary: Summary, cal: Calibration) -> str:
    """A warning when the run's lookahead took other steps than the study's: v2 was fitted on the study's, and
    the lookahead's KL and success change grow with the step size."""
    la, want = summary.lookahead, cal.lookahead_settings
    if la is None or la.status != "ok" or not want:
        return ""
    have = {k: la.settings.get(k) for k in want}
    if all(isinstance(have[k], (int, float)) and math.isclose(have[k], want[k], rel_tol=1e-9) for k in want):
        return ""
    fmt = ", ".join(f"{k} {v:g}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in want.items())
    return (f" This run's lookahead ({', '.join(f'{k} {v}' for k, v in have.items())}) is not the study's ({fmt}): "
            "its lookahead features lie outside what v2 was fitted on; set lookahead." + "/".join(want) +
            " to the study's values for comparable predictions.")


def contribution_frame(p: Predictions, config: str, method: str) -> pd.DataFrame:
    """Why (config, method) got its predicted gain: per feature its value, the study's mean, SD and range (NaN for
    a file without ranges), whether the value lies outside that range, the coefficient and the contribution
    coef * (value - mean) / SD (0 when imputed), largest first."""
    r = p.row(config, method)
    if r is None:
        raise OpsdError(f"no prediction for ({config}, {method}): this run has "
                        + ", ".join(f"({x.config}, {x.method})" for x in p.rows))
    m = p.calibration.models[r.tier]["d_pass1"]
    lo, hi = ([_num(v) for v in b] for b in m.get("range", [[None] * len(m["features"])] * 2))
    at = {f: i for i, f in enumerate(m["features"])}
    return pd.DataFrame([{"feature": f, "what": WORDS.get(f, f), "value": v, "study_mean": m["mean"][at[f]],
                          "study_sd": m["sd"][at[f]], "study_min": lo[at[f]], "study_max": hi[at[f]],
                          "outside": f in r.outside, "coef": m["coef"][at[f]], "contribution": c}
                         for f, v, c in r.contributions])


def join(verdicts: pd.DataFrame, p: Predictions) -> pd.DataFrame:
    """The v1 verdict table with v2's ``JOINED`` columns (prefixed ``v2_``) of the method that trains each
    (config, signal); signals no v2 method trains (rev_kl, fwd_kl) get NaN."""
    v2 = p.frame()[["config", "signal", *JOINED]].rename(columns={c: f"v2_{c}" for c in JOINED})
    return verdicts.merge(v2, on=["config", "signal"], how="left")


def rule_text(delta: float) -> str:
    """The v2 verdict rule in words (docs/verdict.md, the app and the reports show this text)."""
    return (f"helps if the 95% interval of the predicted held-out pass@1 change lies above +{delta:g}, hurts if it "
            f"lies below -{delta:g}, unclear otherwise; the interval is the prediction plus the 2.5% and 97.5% "
            "quantiles of the study's out-of-fold residuals.")


def _rho(ci: dict | None) -> str:
    if not ci or ci.get("estimate") is None:
        return "n/a"
    return f"{ci['estimate']:+.2f} [{_num(ci.get('lo')):+.2f}, {_num(ci.get('hi')):+.2f}]"


def effects_text(r: Row) -> str:
    collapse = ("collapse risk: pass@1 predicted up while pass@4 goes down" if r.collapse
                else "no collapse predicted")
    # three significant digits: a drift spans orders of magnitude (a log-target model), so 0.0004 is not 0.000
    return (f"Predicted drift KL(trained || initial) {r.drift:.3g} per token (95%: {r.drift_lo:.3g} to "
            f"{r.drift_hi:.3g}); forgetting (change of regression-set "
            f"accuracy) {r.forgetting:+.3f}; Δpass@4 {r.pass4:+.3f}: {collapse}.")


def outside_text(rows: list[Row]) -> str:
    """The rows whose features lie outside the study's: their predictions extrapolate (a model of another scale)."""
    far = [r for r in rows if r.outside]
    if not far:
        return ""
    names = sorted({f for r in far for f in r.outside})
    return (f" {len(far)} of {len(rows)} row(s) have features outside the range of the rows the model was fitted on "
            f"({', '.join(names)}): their predictions extrapolate and their intervals do not cover that; "
            "`opsd-diag scoreboard --fit` on your own finished runs gives a calibration fitted to them.")


def panel(p: Predictions, trainable=None) -> dict[str, str]:
    """The decision panel's text (app, ``opsd-diag report``, HTML report): headline, caution (a failure check that
    fired for the recommended config, or for the row the answer guard passed over), effects, why, ranking, record
    (what the ranking did on worlds built after it), tiers, calibration, looks (the history that chose the rule in
    force); plain text, names as the run holds them."""
    cal, rec, first = p.calibration, p.recommended(trainable), p.recommended(trainable, guarded=False)
    best = rec or (p.rows[0] if p.rows else None)
    out, history = {}, []
    if first is not None and first is not rec:  # the answer guard skipped it
        where = "above it" if rec else "first"
        out["caution"] = (f"Passed over: {first.config} with {first.method} ranks {where}, but "
                          f"{p.cautions[first.config]}; the recommendation skips such a config (the seventeenth "
                          "look, docs/verdict.md).")
    elif rec is not None and rec.config in p.cautions:
        out["caution"] = f"Caution: {p.cautions[rec.config]}."
    if p.ranked_by == "accuracy_gap":
        v2_first = cal.method_order in ("v2_gain", "v2_config")  # v2 ranks, G gates (the eighth look)
        study = (f"{cal.reason}. G's Spearman with the realised pass@1 change was {_rho(cal.accuracy_gap)}; v2's "
                 f"{_rho(cal.lowo.get('v2', {}).get('spearman'))}")
        n = cal.method_order_look if f"look{cal.method_order_look}" in cal.later_looks else None  # record: "looks"
        lead = ("Ranked by predictor v2's predicted pass@1 change, recommended only where the accuracy gap G > 0"
                + (f" (chosen by predictor v2's look {n}, among the looks below)." if n else ".") if v2_first else
                f"Ranked by the accuracy gap G, not by predictor v2: in the validity study v2 lost to G: {study}.")
        # how the rows are ranked; then what that ranking did on worlds built after it (the record); the first
        # study's pooled comparison, which a v2 ranking no longer rests on, goes with the looks' history
        out["ranking"] = " ".join([lead, predictor.ORDER_TEXT[cal.method_order].format(scale=cal.sampled_scale)])
        if cal.checks:
            out["record"] = cal.checks
        if v2_first:
            history.append(f"Alone, pooled over the first study's worlds, v2 lost to G: {study}.")
        by = "predictor v2 among configs with G > 0" if v2_first else "the accuracy gap"
        out["headline"] = (f"Recommended by {by}: {rec.config} trained with {rec.method} (G {rec.accuracy_gap:+.3f}; "
                           f"v2 predicts {rec.interval()}; verdict {rec.verdict})" if rec else
                           "Every trainable config with a positive accuracy gap G is flagged by a failure check: "
                           "nothing is recommended" if first else
                           "No teacher config has a positive accuracy gap G: nothing is recommended")
    else:
        tier = cal.lowo.get(cal.choice, {})
        scheme = tier.get("scheme", "leave-one-world-out")  # a calibration's own cross-validation
        out["ranking"] = (f"Ranked by predictor v2's predicted pass@1 change (the study chose {cal.choice}: "
                          f"{cal.reason}; {scheme} Spearman {_rho(tier.get('spearman'))} against the "
                          f"accuracy gap G's {_rho(cal.accuracy_gap)}).")
        out["headline"] = (f"Recommended: {rec.config} trained with {rec.method}: predicted Δpass@1 "
                           f"{rec.interval()}, helps (95% interval above +{cal.delta:g})" if rec else
                           "Every trainable (config, method) predicted to help is flagged by a failure check: "
                           "nothing is recommended" if first else "No (config, method) is predicted to help" + (
                               f": the best, {best.config} with {best.method}, is predicted {best.interval()} "
                               f"({best.verdict}); helps needs the whole 95% interval above +{cal.delta:g}"
                               if best else ""))
    if n := len(cal.later_looks):  # one line a look: a reader scans the history, a terminal prints it as a list
        history.append(f"{n} later pre-registered look{'s' * (n != 1)}, each judged on a world built after its plan:"
                       + "".join(f"\n- {v['summary']}." for v in cal.later_looks.values()))
    if history:  # how the rule in force was chosen: the app folds it away, the reports print it last
        out["looks"] = " ".join(history)
    if best is not None:
        who = "" if best is rec else f" ({best.config} with {best.method})"
        out["effects"] = " ".join([effects_text(best), *([cal.checks_forgetting] if cal.checks_forgetting else [])])
        out["why"] = (f"Why{who}: {best.why()}; starting from the study's mean {best.intercept:+.3f} "
                      f"(tier {best.tier}).")
    tiers = {t: sum(r.tier == t for r in p.rows) for t in TIERS}
    fallback = sorted({r.method for r in p.rows if r.tier == "v2_no_lookahead"})
    why = ("" if not tiers["v2_no_lookahead"] or cal.choice == "v2_no_lookahead" else
           " (this run has no lookahead result: a lookahead: section in its config gives the full model)"
           if not tiers["v2"] else f" (no lookahead result for {', '.join(fallback)}: add the loss methods to "
                                   "lookahead.methods for the full model)")
    out["tiers"] = ("Tier: " + "; ".join(f"{t} on {n} row(s)" for t, n in tiers.items() if n) + why + "." + p.note
                    + outside_text(p.rows))
    out["calibration"] = (f"Calibration: {cal.source}" + (f" ({cal.study})" if cal.source == "shipped" and cal.study
                                                         else "") + f"; verdict rule: {rule_text(cal.delta)}")
    return out
