"""Trajectory: a folder of probe runs (``training.diagnose_every`` of opsd-train, or a TRL
``DiagnosisCallback``) as curves over training steps: the signals, the verdicts, the predicted gain and the
policy's collapse detectors; each probe opens as an ordinary run (Overview, Tokens...)."""

from pathlib import Path

import plotly.express as px
import streamlit as st

from app import common
from opsd_diag import trajectory
from opsd_diag.errors import OpsdError

st.title("Trajectory")
default = st.query_params.get("probes") or st.session_state.get("probes_dir") or ""
if not default and st.session_state.get("run_dir") and (Path(st.session_state["run_dir"]) / "probes").is_dir():
    default = str(Path(st.session_state["run_dir"]) / "probes")  # the open run is a training run with probes
text = st.text_input("Probes folder", default, help="the probes/ folder of an opsd-train run, or the folder a "
                                                    "DiagnosisCallback writes to: one run directory per probe step")
if not text:
    st.info("Give a folder of probe runs: train with training.diagnose_every, or add a DiagnosisCallback to a TRL "
            "trainer (docs/probes.md).")
    st.stop()
try:
    root = common.user_path(text, "probes folder")
    frame = trajectory.frame(root)
except OpsdError as e:
    st.error(common.plain(str(e)))
    st.stop()
st.session_state["probes_dir"] = str(root)
st.query_params["probes"] = str(root)
steps = sorted(frame["step"].unique())
configs = sorted(c for c in frame["config"].unique() if c != trajectory.STUDENT)
st.caption(f"{len(steps)} probes, steps {steps[0]} to {steps[-1]}; teacher configs: {', '.join(configs)}")


def lines(rows, title: str, color: str = "what"):
    fig = px.line(rows.sort_values("step"), x="step", y="value", color=color, markers=True, title=title)
    fig.update_layout(height=330, margin={"t": 40, "b": 30})
    return fig


st.subheader("Signals")
config = st.selectbox("Teacher config", configs, key="traj_config")
picked = st.multiselect("Signals", list(trajectory.HEADLINE), default=["r_opd", "a_d2", "kl_rev", "near_zero_share"],
                        key="traj_signals")
own = frame[frame["config"] == config]
st.plotly_chart(lines(own[own["what"].isin(picked)], f"Mean signals of {config} over steps"), key="traj_sig")
st.caption("Each point is one probe's mean over its tokens (the Overview's summary table of that probe run).")

st.subheader("Verdicts and predicted gain")
verdicts = own[own["what"].str.startswith("verdict/")].assign(signal=lambda d: d["what"].str.removeprefix("verdict/"))
if verdicts.empty:
    st.info("These probes ran without the predictor (diagnose_every.verdict: false): no verdicts.")
else:
    grid = verdicts.pivot_table(index="signal", columns="step", values="value")
    grid.columns = [f"step {c}" for c in grid.columns]  # one cell per probe, whatever the spacing of the steps
    fig = px.imshow(grid, color_continuous_scale=[[0, "#c0392b"], [0.5, "#d5d8dc"], [1, "#27ae60"]], zmin=-1,
                    zmax=1, aspect="auto", title=f"v1 verdict of {config} per signal: hurts -1, unclear 0, helps +1")
    fig.update_layout(height=300, margin={"t": 40, "b": 30})
    st.plotly_chart(fig, key="traj_verdicts")
gain = own[own["what"].str.startswith("predicted_gain/")]
if not gain.empty:
    st.plotly_chart(lines(gain, f"Predicted held-out Δpass@1 per method (predictor v2) for {config}"),
                    key="traj_gain")

st.subheader("Collapse detectors")
student = frame[frame["config"] == trajectory.STUDENT]
cols = st.columns(2)
for i, what in enumerate(w for w in trajectory.COLLAPSE if w in set(student["what"])):
    cols[i % 2].plotly_chart(lines(student[student["what"] == what], what), key=f"traj_{what}")
change = trajectory.changes(frame)
st.dataframe(change[change["config"] == trajectory.STUDENT].drop(columns=["config", "name"]), hide_index=True)
st.caption("The policy's own numbers on its probe samples: mean entropy, pass@k minus pass@1 (the headroom that "
           "collapse of diversity removes first), accuracy, completion length, truncated share; change is last "
           "minus first probe.")

st.subheader("Probe runs")
for step, d in trajectory.probes(root):
    c1, c2 = st.columns([3, 1])
    c1.write(f"step {step}: `{common.md(d)}`")
    if c2.button(f"Open step {step}", key=f"traj_open_{step}"):
        common.open_run(str(d))
        st.switch_page("views/overview.py")
