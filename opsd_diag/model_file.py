"""The predictor v2 model file (``opsd_diag/data/predictor_v2.json`` as shipped, or a calibration of the same
format): its tiers and outcomes, checked and held as a ``Calibration`` (pure; ``prediction.load`` reads the file).
``benchmarks/validity/v2/report_v2.py`` writes the shipped one, ``opsd-diag scoreboard --fit`` a user's."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from opsd_diag.core import predictor

SHIPPED = "predictor_v2.json"  # in opsd_diag/data/
TIERS = {"v2": ("accuracy_gap", "lookahead_dv", "lookahead_dll", "lookahead_kl", "teachability", "mean_jsd", "is_jsd"),
         "v2_no_lookahead": ("accuracy_gap", "teachability", "mean_jsd", "is_jsd")}
CHOICES = (*TIERS, "accuracy_gap")
RECOMMENDATIONS = ("best", "answer_guard")  # which row is recommended: the best-ranked, or the best a check spares
OUTCOMES = ("d_pass1", "d_pass4", "d_regression", "kl_to_initial")


@dataclass(frozen=True)
class Calibration:
    """A predictor v2 model file (format: module docstring of ``benchmarks/validity/v2/report_v2.py``)."""
    source: str  # "shipped" or the file's path
    choice: str  # what the study's ship rule chose
    reason: str
    delta: float
    models: dict  # tier -> outcome -> model (core.predictor's dict plus residual_band)
    lowo: dict  # tier -> the study's leave-one-world-out figures
    accuracy_gap: dict | None  # G's pooled Spearman in the same study
    studies: dict  # earlier studies' figures (decision.validity's dicts)
    study: str  # where the study's results are written up
    lookahead_settings: dict  # the lookahead the study fitted on (steps, rollouts_per_step, learning_rate)
    later_looks: dict = field(default_factory=dict)  # look name -> a later look's record, look2 .. look16 in order
    method_order: str = "predicted_gain"  # when G gates: how the rows are ordered (core.predictor.METHOD_ORDERS)
    sampled_scale: float = 1.0  # g_scaled: the share of G a sampled-token loss counts
    checks: str = ""  # the file as shipped, checked on worlds built after its last look (report_checks.py)
    method_order_look: int | None = None  # the later look that chose ``method_order`` (its record: later_looks)
    checks_forgetting: str = ""  # what the forgetting column ranked well on those worlds, and what not
    recommendation: str = "best"  # answer_guard: the recommendation skips a config the answer-only check flags


def parse(d: dict, source: str) -> Calibration:
    """The model file's data ``d`` checked and held; a ValueError (or KeyError, TypeError) names what is wrong."""
    if d.get("version") != 2:
        raise ValueError(f"version {d.get('version')!r}, not 2")
    if d["choice"] not in CHOICES:
        raise ValueError(f"choice {d['choice']!r} is none of {', '.join(CHOICES)}")
    order = d.get("method_order", {}).get("rule", "predicted_gain")
    if order not in predictor.METHOD_ORDERS:
        raise ValueError(f"method_order {order!r} is none of {', '.join(predictor.METHOD_ORDERS)}")
    scale = float(d.get("method_order", {}).get("sampled_scale", 1.0))
    if not 0.0 <= scale <= 1.0:
        raise ValueError(f"method_order's sampled_scale {scale!r} is not in [0, 1]")
    recommendation = (d.get("recommendation") or {}).get("rule", "best")
    if recommendation not in RECOMMENDATIONS:
        raise ValueError(f"recommendation {recommendation!r} is none of {', '.join(RECOMMENDATIONS)}")
    for tier, outcome in ((t, o) for t in TIERS for o in OUTCOMES):
        m = d["models"][tier][outcome]
        n = len(m["features"])
        if not all(len(m[k]) == n for k in ("mean", "sd", "coef")) or len(m["residual_band"]) != 2:
            raise ValueError(f"model {tier}/{outcome} has mismatched lengths")
        if m.get("target", "raw") not in predictor.TARGETS:
            raise ValueError(f"model {tier}/{outcome} has target {m['target']!r}, none of {', '.join(predictor.TARGETS)}")
        if sorted(set(m["features"]) - set(predictor.DERIVED)) != sorted(TIERS[tier]) \
                or len(set(m["features"])) != n:
            raise ValueError(f"model {tier}/{outcome} takes {m['features']}, not {list(TIERS[tier])} "
                             f"(with any of {', '.join(predictor.DERIVED)})")
        if not all(math.isfinite(float(v)) for v in [*m["mean"], *m["sd"], *m["coef"], m["intercept"]]):
            raise ValueError(f"model {tier}/{outcome} holds a number that is not finite")
        if "range" in m and not (len(m["range"]) == 2 and all(len(b) == n for b in m["range"])
                                 and all(v is None or math.isfinite(float(v)) for b in m["range"] for v in b)):
            raise ValueError(f"model {tier}/{outcome} has a range that is not [[min] * {n}, [max] * {n}]")
    checks = d.get("checks") or {}  # report_checks.py's record of the file on worlds built after its last look
    return Calibration(source, d["choice"], str(d.get("reason") or ""), float(d["delta"]), d["models"],
                       d.get("lowo") or {}, d.get("accuracy_gap"), d.get("studies") or {}, str(d.get("study") or ""),
                       {k: v for k, v in (d.get("lookahead_settings") or {}).items() if isinstance(v, (int, float))},
                       {k: v for k, v in sorted((d.get("later_looks") or {}).items(),
                                                key=lambda kv: (len(kv[0]), kv[0]))  # look2 .. look10
                        if isinstance(v, dict) and isinstance(v.get("summary"), str)}, order, scale,
                       str(checks.get("summary") or ""), _look_number(d.get("method_order", {})),
                       str(checks.get("forgetting") or ""), recommendation)


def _look_number(order: dict) -> int | None:
    return order.get("look") if type(order.get("look")) is int else None  # a bool is no look number
