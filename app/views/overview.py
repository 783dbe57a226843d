"""Overview: accuracy, pass@k, the per-config summary table, the ranked verdicts with "Train this"."""

import streamlit as st

from app import common

BADGE = {"helps": ":blue-background[**helps**]", "hurts": ":red-background[**hurts**]",
         "unclear": ":gray-background[unclear]"}
COLOUR = {"helps": "background-color: #dbe4ff", "hurts": "background-color: #ffd9d9", "unclear": ""}

run = common.require_run()
s, f = run.summary, run.facts()
st.title("Overview")
st.caption(f"{common.md(run.path)} · {f['n_problems']} problems × {f['samples']} samples · "
           f"T_sample={f['sampling_temperature']} · T_score={f['scoring_temperature']} · centering={f['centering']}")

acc = s.student_accuracy
cols = st.columns(1 + len(s.pass_at_k))
cols[0].metric("Student accuracy", "n/a" if acc.estimate is None else f"{acc.estimate:.3f}",
               help=f"share of student samples the answer checker marks correct (95% CI over prompts: {acc.text()})")
for col, (k, v) in zip(cols[1:], s.pass_at_k.items()):
    col.metric(k, "n/a" if v is None else f"{v:.3f}", help="unbiased pass@k over the student samples")

st.subheader("Per teacher config")
st.dataframe(s.headline_frame(), hide_index=True, column_config={
    c: st.column_config.NumberColumn(format="%.4f") for c in ("r_opd", "a_opd", "a_d2", "kl_rev", "jsd")})
st.caption("Means per token over all scored tokens. sign_agreement: how often a_opd and a_delta share a sign among "
           "the tokens where both are not numerically zero (near_zero_share: the rest); accuracy_gap: teacher with "
           "its context minus the student; student_truncated / teacher_truncated: share of samples cut at "
           "max_completion_length or ending inside their thinking block (counted incorrect unless "
           "analysis.truncated is check).")


def verdict_rows(verdicts) -> None:
    """One row per ranked (config, signal): the verdict in colour, the full reason, and "Train this"."""
    head = st.columns([0.5, 2, 1, 1, 1, 7, 1.4])
    for col, name in zip(head, ("#", "config", "signal", "verdict", "score", "why")):
        col.markdown(f"**{name}**")
    for r in verdicts.itertuples():
        c = st.columns([0.5, 2, 1, 1, 1, 7, 1.4], vertical_alignment="center")
        c[0].write(r.rank)
        c[1].text(r.config)  # names and reasons come from summary.json: shown as text, never as markdown
        c[2].text(r.signal)
        c[3].markdown(BADGE.get(r.verdict, common.md(r.verdict)))
        c[4].write("n/a" if r.score != r.score else f"{r.score:+.3f}")
        c[5].text(r.reason)
        if c[6].button("Train this", key=f"train-{r.config}-{r.signal}",
                       help=f"open the training form for {r.config} with {r.signal}"):
            st.session_state["train_this"] = {"run": str(run.path), "config": r.config, "signal": r.signal}
            st.switch_page("views/train.py")


verdicts = run.verdicts()
if verdicts is not None:
    st.subheader("Verdict and ranking")
    if s.ideal is not None:
        st.caption(common.md(s.ideal.note()))
    compact = st.toggle("Compact table", key="ov_compact", help="one sortable table instead of rows with buttons")
    if compact:
        st.dataframe(verdicts.style.map(lambda v: COLOUR.get(v, ""), subset=["verdict"]).format(
            {"score": "{:+.3f}"}), hide_index=True, column_config={"reason": st.column_config.TextColumn(
                width="large")})
    else:
        verdict_rows(verdicts)
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
