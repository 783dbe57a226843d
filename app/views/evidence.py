"""Evidence: why the predictions and verdicts came out as they did. Predictor v2: each feature's contribution to a
(config, method)'s predicted gain. The v1 rule: the ideal-gradient predictor's nodes and candidates, each signal's
direction against the ideal gradient, correct vs incorrect rollouts, divergence vs alignment."""

import streamlit as st

from app import common
from opsd_diag.report.evidence import CONTRIBUTION_HELP, EVIDENCE_HELP, contribution_figure, node_table

run = common.require_run()
st.title("Evidence")
pred = run.predictions()
if pred is not None:
    from opsd_diag import prediction

    st.subheader("Predictor v2: why this predicted gain")
    labels = [f"#{r.rank} {r.config} · {r.method}: {r.interval()} ({r.verdict}, tier {r.tier})" for r in pred.rows]
    pick = pred.rows[st.selectbox("(config, method)", range(len(labels)), key="ev_v2_row",
                                  format_func=labels.__getitem__)]
    frame = prediction.contribution_frame(pred, pick.config, pick.method)
    st.plotly_chart(contribution_figure(frame, f"{pick.config} · {pick.method}: predicted Δpass@1 {pick.interval()}"),
                    key="ev_v2_fig")
    st.caption(CONTRIBUTION_HELP)
    st.dataframe(frame, hide_index=True, key="ev_v2_table",
                 column_config={c: st.column_config.NumberColumn(format="%+.4f") for c in
                                ("value", "study_mean", "study_sd", "study_min", "study_max", "coef",
                                 "contribution")})
    st.caption(common.md(f"Study mean Δpass@1 {pick.intercept:+.3f}; " + prediction.effects_text(pick) + " "
                         + prediction.panel(pred)["calibration"]))
    st.subheader("The v1 rule: the ideal-gradient predictor's evidence")
ideal = run.summary.ideal
if ideal is None or ideal.status != "ok" or run.nodes.empty:
    st.info(common.md(ideal.note()) if ideal is not None else "This run has no ideal-gradient predictor (no 'ideal' section in "
            "its config), so there is no evidence behind a verdict to show.")
    st.stop()
st.caption(common.md(ideal.note()))

c1, c2 = st.columns(2)
signals = sorted({k.removeprefix("align_") for k in run.nodes.columns if k.startswith("align_")})
signal = c1.selectbox("Signal", signals, index=signals.index("r_opd") if "r_opd" in signals else 0, key="ev_signal",
                      format_func=common.signal_name)
divergence = c2.selectbox("Divergence", ["kl_rev", "jsd"], key="ev_div")

figs = run.evidence_figures(signal, divergence)
for name in ("advantage", "direction"):
    st.plotly_chart(figs[name], key=f"ev_{name}")
    st.caption(EVIDENCE_HELP[name])
a, b = st.columns(2)
with a:
    st.plotly_chart(figs["split"], key="ev_split")
    st.caption(EVIDENCE_HELP["split"])
with b:
    st.plotly_chart(figs["scatter"], key="ev_scatter")
    st.caption(EVIDENCE_HELP["scatter"])

st.subheader("The nodes the predictor chose")
nodes = node_table(run.nodes)
st.dataframe(nodes, hide_index=True, key="ev_nodes", column_config={
    c: st.column_config.NumberColumn(format="%.3f") for c in nodes.columns if c.startswith(("align_", "A_T", "V", "h_"))})
node_ids = sorted(run.nodes["node_id"].unique().tolist())
node = st.selectbox("Node", node_ids, key="ev_node", format_func=lambda n: (
    lambda r: f"node {n}: rollout {r.rollout_id}, position {r.pos}, entropy {r.h_s:.2f} nats, "
              f"{'correct' if r.correct else 'incorrect'} rollout")(run.nodes[run.nodes['node_id'] == n].iloc[0]))
picked = run.nodes[run.nodes["node_id"] == node].iloc[0]
if st.button("Show this token's heatmap", key="ev_to_tokens",
             help=f"the Tokens page on rollout {picked.rollout_id} with position {picked.pos} marked"):
    st.session_state["tok_focus"] = (int(picked.rollout_id), int(picked.pos))
    st.switch_page("views/tokens.py")
cands = run.candidates(common.tokenizer(run, note=False))
st.dataframe(cands[cands["node_id"] == node].drop(columns=["node_id"]), hide_index=True, key="ev_cands",
             column_config={c: st.column_config.NumberColumn(format="%.4f") for c in ("p_student", "q_teacher",
                                                                                      "success", "h_s")})
st.caption("Candidates at the node: the student's and each teacher's top-k tokens; p_student and q_teacher are their "
           "probabilities renormalised over the candidates, success the share of student continuations from that "
           "token that the answer checker marked correct; sampled: the token the rollout took.")
