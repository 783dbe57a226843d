"""Overview: the decision (predictor v2: what to train, its predicted gain, drift, forgetting, collapse risk and
why; the v1 rule with the cheap baselines and its validity studies as secondary evidence), accuracy, pass@k, the
per-config summary table, v2's predicted effect per (config, method), the v1 verdicts with "Train this"."""

import math

import streamlit as st

from app import common
from opsd_diag.core.verdict import SYMBOLS

BADGE = {"helps": ":blue-background[:blue[**helps**]]", "hurts": ":red-background[:red[**hurts**]]",
         "unclear": ":gray-background[unclear]"}
COLOUR = {"helps": "background-color: #b9ccff", "hurts": "background-color: #ffc2c2", "unclear": ""}

run = common.require_run()  # a run in progress stops here, before the heavy imports below
from opsd_diag import decision, levers, prediction, schedule_points  # noqa: E402 (these import opsd_diag.run and the summary model: only
from trainer import from_diagnosis  # noqa: E402  once a finished run is shown)

s, f = run.summary, run.facts()
st.title("Overview")
f = {k: common.md(v) for k, v in f.items()}  # the manifest's values, shown as written (never markdown)
st.caption(f"{common.md(run.path)} · {f['n_problems']} problems × {f['samples']} samples · "
           f"T_sample={f['sampling_temperature']} · T_score={f['scoring_temperature']} · centering={f['centering']}")


def method(config: str, signal: str) -> str | None:
    """The training method of (config, signal) in words, or None when it cannot be trained."""
    if from_diagnosis.why_not(run.config, config, signal):
        return None
    m = from_diagnosis.method_for(run.config, config, signal)
    extra = ", ".join(f"{k} {v}" for k, v in m.items() if k not in ("teacher", "method"))
    return m["method"] + (f" ({extra})" if extra else "")


def train_button(config: str, signal: str, label: str, key: str, **kw) -> None:
    why = from_diagnosis.why_not(run.config, config, signal)
    name = common.signal_name(signal)
    if st.button(label, key=key, disabled=why is not None,
                 help=f"cannot be trained: {why}" if why else f"open the training form for {config} with {name}", **kw):
        st.session_state["train_this"] = {"run": str(run.path), "config": config, "signal": signal}
        st.switch_page("views/train.py")


def trainable(config: str, signal: str) -> bool:
    return from_diagnosis.why_not(run.config, config, signal) is None


def lever_lines() -> None:
    """The lever recommendations (``lookahead.levers``: the token mask; ``lookahead.schedule_points``: how much of
    the solution the teacher sees), as in `opsd-diag report`, inside the decision's box."""
    for line in [*levers.text(s.levers), *schedule_points.text(s.schedule)]:
        st.markdown(":material/tune: " + common.md(line))


def prediction_panel(p: prediction.Predictions) -> None:
    """Predictor v2's call (prediction.panel: the same text as the reports), in one box at the top."""
    text, rec = prediction.panel(p, trainable), p.recommended(trainable)
    with st.container(border=True, key="v2-panel"):
        a, b = st.columns([5, 1.3], vertical_alignment="center")
        a.markdown("#### " + common.md(text["headline"]))
        if rec is not None:
            with b:
                train_button(rec.config, rec.signal, "Train it", "decide-train", type="primary")
        by_gap = p.ranked_by == "accuracy_gap"  # said plainly, in the panel's own text size: the ranking and its record
        if "caution" in text:
            st.warning(common.md(text["caution"]))
        for k in ("ranking", "record", "effects", "why") if by_gap else ("effects", "why"):
            if k in text:
                st.markdown(common.md(text[k]))
        for k in ("tiers", "calibration") if by_gap else ("ranking", "tiers", "calibration"):
            st.caption(common.md(text[k]))
        if "looks" in text:
            with st.expander("How the rule in force was chosen"):
                for line in text["looks"].splitlines():
                    st.caption(common.md(line))
        lever_lines()


V1_FOLDED = "The v1 rule's call (verdicts on the ideal-gradient quantities): secondary evidence"


def decision_panel(d: decision.Decision, secondary: bool) -> None:
    """The v1 rule's call with everything that qualifies it: the box at the top, or folded away under v2's
    (``secondary``: its verdict can disagree with v2's, and the study ranks it below G)."""
    with st.expander(V1_FOLDED) if secondary else st.container(border=True):
        v1_call(d, secondary)


def v1_call(d: decision.Decision, secondary: bool) -> None:
    """The v1 recommendation, its runner-up, the cheap baselines' picks and what the validity studies found."""
    rec = d.recommended
    if rec is None:
        counts = {v: sum(r.verdict == v for r in d.rows) for v in ("unclear", "hurts")}
        st.markdown(f"#### No (config, signal) is predicted to help{' by the v1 rule' if secondary else ''}\n"
                    f"{counts['unclear']} unclear, "
                    f"{counts['hurts']} hurts: the evidence does not support training any of them yet "
                    "(a larger predictor budget or more prompts narrows the intervals).")
    else:
        a, b = st.columns([5, 1.3], vertical_alignment="center")
        a.markdown(f"#### {'The v1 rule recommends' if secondary else 'Recommended'}: {common.md(rec.config)} · "
                   f"{common.signal_name(rec.signal)} "
                   f"({method(rec.config, rec.signal) or 'not trainable'})\n"
                   f"Verdict {BADGE['helps']} · predicted effect (score, first-order gain per unit step, 95% "
                   f"interval over prompts) **{rec.interval()}**")
        with b:
            train_button(rec.config, rec.signal, "Train it", "decide-train-v1" if secondary else "decide-train",
                         type="secondary" if secondary else "primary")
        r = d.runner_up
        if r is None:
            st.markdown("No other config to compare with.")
        else:
            sep = {True: "**separable**: the intervals do not overlap",
                   False: "**not separable**: the 95% intervals overlap",
                   None: "separability unknown (an interval is missing)"}[d.separable]
            st.markdown(f"Runner-up (best of another config): {common.md(r.config)} · {common.signal_name(r.signal)}, "
                        f"{r.verdict}, score {r.interval()}: {sep}.")
        spread = d.tied_within.get(rec.config)
        n_sig = sum(x.config == rec.config for x in d.rows)
        if spread is not None and n_sig > 1:
            st.markdown(f"The {n_sig} signals of {common.md(rec.config)} lie within {spread:.3f} of each other (they share "
                        "its teacher advantage): the ranking is mostly a choice of config.")
    base = []
    if d.by_accuracy_gap:
        c, v = d.by_accuracy_gap
        base.append(f"largest accuracy gap G: **{common.md(c)}** ({v:+.3f})")
    if d.by_advantage:
        c, v = d.by_advantage
        base.append(f"largest teacher advantage A_T: **{common.md(c)}** ({v:+.3f})")
    if base:
        agree = rec is not None and all(x[0] == rec.config for x in (d.by_accuracy_gap, d.by_advantage) if x)
        tail = "" if rec is None else " (the same config)." if agree else " (another config than the recommendation)."
        st.markdown("Cheap baselines pick: " + "; ".join(base) + tail)
    for study in decision.studies().values():
        st.caption(decision.validity_text(study, rec.verdict if rec else None))
    if not secondary:
        lever_lines()


def verdict_rows(d: decision.Decision) -> None:
    """The ranked verdicts grouped by config (in the order of each config's best row), methods inside."""
    widths = [0.5, 1.1, 1.6, 1.1, 2.4, 5.6, 1.4]
    head = st.columns(widths)
    for col, name in zip(head, ("#", "signal", "method", "verdict", "score [95%]", "why")):
        col.markdown(f"**{name}**")
    configs = list(dict.fromkeys(r.config for r in d.rows))
    for config in configs:
        gap = s.configs[config].teacher_minus_student_accuracy if config in s.configs else None
        adv = decision.advantage(s, config)
        st.markdown(f"**{common.md(config)}** · G {gap.text() if gap else 'n/a'} · A_T {adv.text() if adv else 'n/a'}")
        for r in (x for x in d.rows if x.config == config):
            c = st.columns(widths, vertical_alignment="center")
            c[0].write(r.rank)
            c[1].write(common.signal_name(r.signal))
            c[2].write(method(r.config, r.signal) or "—")
            c[3].markdown(BADGE.get(r.verdict, r.verdict))
            c[4].write(r.interval())
            c[5].text(s.verdicts[r.config][r.signal].reason)  # from summary.json: text, never markdown
            with c[6]:
                train_button(r.config, r.signal, "Train this", f"train-{r.config}-{r.signal}")


pred = run.predictions()
if pred is not None:
    prediction_panel(pred)
dec = decision.decide(s, trainable) if s.ranking else None
if dec is not None:
    decision_panel(dec, secondary=pred is not None)
if pred is None and dec is None and (s.levers or s.schedule):  # no decision box to hold the lever recommendations
    with st.container(border=True):
        lever_lines()

acc = s.student_accuracy
cols = st.columns(1 + len(s.pass_at_k))
cols[0].metric("Student accuracy", "n/a" if acc.estimate is None else f"{acc.estimate:.3f}",
               help=f"share of student samples the answer checker marks correct (95% CI over prompts: {acc.text()})")
for col, (k, v) in zip(cols[1:], s.pass_at_k.items()):
    col.metric(k, "n/a" if v is None else f"{v:.3f}", help="unbiased pass@k over the student samples")

checks = run.failure_checks()  # opsd_diag.checks: each line with the numbers behind it
with st.container(border=True, key="failure-checks"):
    st.markdown(f"**Failure checks**: {sum(c.fired for c in checks)} of {len(checks)} fire "
                "(thresholds: docs/design.md#failure-checks)")
    for c in checks:
        st.markdown((":red[**fires**]" if c.fired else ":green[ok]") + f" · **{common.md(c.name)}**: {common.md(c.line)}")
    mismatch = run.sampler_mismatch()
    if mismatch is not None:
        st.caption("The rollouts file's log-probs against the student's own (d = lp_s − sampler), by completion position:")
        st.dataframe(mismatch, hide_index=True, key="ov_sampler_mismatch")

st.subheader("Per teacher config")
headline = s.headline_frame()
first = [c for c in ("config", "accuracy_gap") if c in headline]  # the decision's columns first: never clipped
st.dataframe(headline[first + [c for c in headline.columns if c not in first]], hide_index=True, column_config={
    **{c: st.column_config.NumberColumn(format="%.4f") for c in ("r_opd", "a_opd", "a_d2", "kl_rev", "jsd")},
    "accuracy_gap": st.column_config.NumberColumn(format="%+.3f", width="medium"),
    "config": st.column_config.TextColumn(width="medium")})
st.caption("Means per token over all scored tokens. sign_agreement: how often a_opd and a_delta share a sign among "
           "the tokens where both are not numerically zero (near_zero_share: the rest); accuracy_gap: teacher with "
           "its context minus the student; student_truncated / teacher_truncated: share of samples cut at "
           "max_completion_length or ending inside their thinking block (counted incorrect unless "
           "analysis.truncated is check).")

if pred is not None:
    st.subheader("Predicted effect per (config, method)")
    st.dataframe(pred.frame().drop(columns="calibration"), hide_index=True, key="ov_predictions", column_config={
        **{c: st.column_config.NumberColumn(format="%+.3f") for c in ("predicted_gain", "lo", "hi", "forgetting",
                                                                      "pass4", "accuracy_gap")},
        **{c: st.column_config.NumberColumn(format="%.4f") for c in ("drift", "drift_lo", "drift_hi")},
        "why": st.column_config.TextColumn(width="large")})
    st.caption("Predictor v2 (docs/verdict.md#predictor-v2): predicted_gain is the change of held-out pass@1 after "
               "training, [lo, hi] its 95% interval; drift: KL(trained || initial) per token, [drift_lo, drift_hi] "
               "its 95% interval; forgetting: change of "
               "regression-set accuracy; pass4: change of pass@4; collapse: pass@1 up while pass@4 goes down; "
               "outside_range: features beyond the range the model was fitted on (the prediction extrapolates).")

verdicts = s.verdict_frame()
if verdicts is not None:
    st.subheader("Verdict and ranking" + (" (v1 rule, secondary evidence)" if pred is not None else ""))
    if s.ideal is not None:
        st.caption(common.md(s.ideal.note()))
    st.caption("Symbols of the rule: " + "; ".join(f"**{k}** = {v}" for k, v in SYMBOLS.items()) + ".")
    compact = st.toggle("Compact table", key="ov_compact", help="one sortable table instead of rows with buttons")
    if compact:
        shown = verdicts.assign(signal=verdicts["signal"].map(common.signal_name))
        st.dataframe(shown.style.map(lambda v: COLOUR.get(v, ""), subset=["verdict"]).format(
            {"score": lambda x: "n/a" if x is None or math.isnan(x) else f"{x:+.3f}"}), hide_index=True,
            column_config={"reason": st.column_config.TextColumn(width="large")})
    else:
        verdict_rows(dec)
    if s.verdict_rule:
        with st.expander("The rule behind the verdict (docs/verdict.md)"):
            st.text(s.verdict_rule)  # as stored in the run: plain text, never markdown
elif s.ideal is not None:
    st.info(common.md(s.ideal.note()))

truncated = {k: v for k, v in s.context_truncated.items() if v}
if truncated:
    st.warning("Privileged context truncated to fit max_prompt_length: "
               + ", ".join(f"{common.md(k)}: {v} prompt(s)" for k, v in truncated.items()))

st.plotly_chart(run.figure("headline"), key="headline")
st.caption(common.FIGURE_HELP["headline"])
