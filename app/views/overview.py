"""Overview: accuracy, pass@k, the per-config summary table, the verdict when the run has one."""

import streamlit as st

from app import common

run = common.require_run()
s, f = run.summary, run.facts()
st.title("Overview")
st.caption(f"{st.session_state['run_dir']} · {f['n_problems']} problems × {f['samples']} samples · "
           f"T_sample={f['sampling_temperature']} · T_score={f['scoring_temperature']} · centering={f['centering']}")

acc = s.student_accuracy
cols = st.columns(1 + len(s.pass_at_k))
cols[0].metric("Student accuracy", "n/a" if acc.estimate is None else f"{acc.estimate:.3f}",
               help=f"share of student samples the answer checker marks correct (95% CI over prompts: {acc.text()})")
for col, (k, v) in zip(cols[1:], s.pass_at_k.items()):
    col.metric(k, "n/a" if v is None else f"{v:.3f}", help="unbiased pass@k over the student samples")

st.subheader("Per teacher config")
st.dataframe(s.headline_frame(), hide_index=True)
st.caption("Means per token over all scored tokens; sign_agreement is the OPD² gate keep fraction; "
           "accuracy_gap is teacher-with-context minus student accuracy.")

verdicts = run.verdicts()
if verdicts is not None:
    st.subheader("Verdict and ranking")
    st.dataframe(verdicts, hide_index=True)
    if s.ideal is not None:
        st.caption(s.ideal.note())
    if s.verdict_rule:
        with st.expander("The rule behind the verdict"):
            st.markdown(s.verdict_rule)
elif s.ideal is not None:
    st.info(s.ideal.note())

truncated = {k: v for k, v in s.context_truncated.items() if v}
if truncated:
    st.warning("Privileged context truncated to fit max_prompt_length: "
               + ", ".join(f"{k}: {v} prompt(s)" for k, v in truncated.items()))

st.plotly_chart(run.figure("headline"), key="headline")
st.caption(common.FIGURE_HELP["headline"])
