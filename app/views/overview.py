"""Overview: accuracy, pass@k, the per-config summary table, the verdict when the run has one."""

import streamlit as st

from app import common
from opsd_diag.report import figures as viz
from opsd_diag.core.aggregate import summary_frame

run = common.require_run()
s, m = run["summary"], run["manifest"]
st.title("Overview")
st.caption(f"{st.session_state['run_dir']} · {m.get('n_problems')} problems × "
           f"{m.get('config', {}).get('sampling', {}).get('num_samples')} samples · "
           f"T_sample={m.get('sampling_temperature')} · T_score={m.get('scoring_temperature')} · "
           f"centering={m.get('centering')}")

acc = s.get("student_accuracy") or {}
cols = st.columns(1 + len(s.get("pass_at_k") or {}))
cols[0].metric("Student accuracy", "n/a" if acc.get("estimate") is None else f"{acc['estimate']:.3f}",
               help="share of student samples the answer checker marks correct (95% CI over prompts: "
                    f"{acc.get('lo')} – {acc.get('hi')})")
for col, (k, v) in zip(cols[1:], (s.get("pass_at_k") or {}).items()):
    col.metric(k, "n/a" if v is None else f"{v:.3f}", help="unbiased pass@k over the student samples")

st.subheader("Per teacher config")
st.dataframe(summary_frame(s), hide_index=True)
st.caption("Means per token over all scored tokens; sign_agreement is the OPD² gate keep fraction; "
           "accuracy_gap is teacher-with-context minus student accuracy.")

verdict = viz.verdict_frame(s)
if verdict is not None:
    st.subheader("Verdict and ranking")
    st.dataframe(verdict, hide_index=True)
    if viz.ideal_note(s):
        st.caption(viz.ideal_note(s))
    if s.get("verdict_rule"):
        with st.expander("The rule behind the verdict"):
            st.markdown(str(s["verdict_rule"]))

truncated = {k: v for k, v in (s.get("context_truncated") or {}).items() if v}
if truncated:
    st.warning("Privileged context truncated to fit max_prompt_length: "
               + ", ".join(f"{k}: {v} prompt(s)" for k, v in truncated.items()))

st.plotly_chart(viz.headline_figure(s), key="headline")
st.caption(viz.FIGURE_HELP["headline"])
