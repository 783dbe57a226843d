"""Train: start `opsd-train` on a config with a `training` section, follow its metrics live, stop it.

Everything goes through the job protocol (``opsd_diag.jobs``: argv lists, a new process group,
the run directory as the only shared state), so a run started here can also be followed from
another session or stopped from a terminal with ``touch RUN_DIR/STOP``.
"""

import shlex
from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from opsd_diag import jobs
from opsd_diag.errors import OpsdError
from trainer import launch

st.title("Train")
root = Path(st.session_state.get("runs_root", "runs"))
config_path = st.text_input("Config file with a `training` section (YAML)",
                            value="sample_data/configs/train_opsd.yaml", key="train_config")
c1, c2, c3 = st.columns([2, 1, 1])
out = c1.text_input("Run directory", key="train_out", placeholder=f"{root}/train-<config name>-<time> (default)")
processes = c2.number_input("Processes", min_value=1, max_value=64, value=1, key="train_procs",
                            help="more than one starts `accelerate launch` (one per GPU)")
resume = c3.checkbox("Resume", key="train_resume", help="continue the run in this directory from its last checkpoint")

if st.button("Start training", type="primary", key="train_start"):
    try:
        run = launch.start(config_path, out or None, num_processes=int(processes), resume=resume, runs_root=root)
    except OpsdError as e:
        st.error(str(e))
    else:
        st.session_state["train_run"] = str(run.run_dir)
        st.success(f"Started {run.run_dir} (pid {run.pid})")

runs = [str(p) for p in jobs.find_runs(root, "training")]
current = st.session_state.get("train_run")
if current and current not in runs:
    runs.insert(0, current)
if not runs:
    st.info(f"No training runs under {root} yet.")
    st.stop()
chosen = st.selectbox("Follow run", runs, index=runs.index(current) if current in runs else 0, key="train_follow")


def follow(run_dir: str) -> None:
    status = jobs.status(run_dir)
    state = status["status"]
    step, total = status.get("step") or 0, status.get("max_steps") or 0
    st.progress(min(1.0, step / total) if total else 0.0, text=f"{state}: step {step} of {total or '?'}")
    if state == "failed":
        st.error(status.get("error") or "the run failed: see stdout.log below")
    follower = st.session_state.setdefault("train_followers", {}).setdefault(run_dir, jobs.Follower(run_dir))
    follower.poll()  # reads only what was appended since the last refresh
    records = pd.DataFrame(follower.records)
    if not records.empty:
        train = records[records["kind"] == "train"].dropna(axis=1, how="all")
        evals = records[records["kind"] == "eval"].dropna(axis=1, how="all")
        shown = [c for c in ("loss", "r_opd", "kl_k3", "entropy_student", "tokens_per_s") if c in train]
        if shown:
            fig = px.line(train.melt(id_vars="step", value_vars=shown), x="step", y="value", facet_col="variable",
                          facet_col_wrap=3, markers=True)
            fig.update_yaxes(matches=None, showticklabels=True, title=None)
            fig.for_each_annotation(lambda a: a.update(text=a.text.split("=")[-1]))  # "variable=loss" -> "loss"
            st.plotly_chart(fig, key=f"train-{run_dir}")
        acc = [c for c in evals if c.startswith("pass@") or c in ("kl_to_initial", "regression_nll")]
        if acc:
            st.plotly_chart(px.line(evals, x="step", y=acc, markers=True, title="held-out evaluation"),
                            key=f"eval-{run_dir}")
    log = Path(run_dir) / "stdout.log"
    with st.expander("Log", expanded=state in ("failed", "died")):
        st.code("".join(log.read_text(errors="replace").splitlines(keepends=True)[-40:]) if log.is_file()
                else "(no output yet)")


status = jobs.status(chosen)
argv = status.get("argv")
if argv:
    st.code(shlex.join(argv), language="bash")
active = status["status"] in ("running", "starting")
if active and st.button("Stop (saves a checkpoint first)", key="train_stop"):
    jobs.stop(chosen)
    st.rerun()
st.fragment(follow, run_every=2.0 if active else None)(chosen)
