"""New diagnosis: validate a config file in place, start `opsd-diag run` as a job, follow it."""

import shlex
from pathlib import Path

import streamlit as st

from app import jobs
from opsd_diag import jobs as job_protocol
from opsd_diag.errors import OpsdError
from opsd_diag.io import store
from opsd_diag.io.config import load_config

st.title("New diagnosis")
default = "sample_data/configs/quickstart.yaml"
config_path = st.text_input("Config file (YAML)", value=default, key="config_path")
root = Path(st.session_state.get("runs_root", jobs.RUNS_ROOT))
out = st.text_input("Run directory", key="out_dir", placeholder=f"{root}/<config name>-<time> (default)",
                    help="a new or empty folder; an existing run of the same config is resumed")
c1, c2 = st.columns(2)
validate = c1.button("Validate config", key="validate")
start = c2.button("Start diagnosis", type="primary", key="start")

if validate or start:
    try:
        cfg = load_config(config_path)
    except OpsdError as e:
        st.error(str(e))
    else:
        st.success(f"Valid: student {cfg.student.model}, teachers {', '.join(t.name for t in cfg.teachers)}, "
                   f"{cfg.sampling.num_samples} samples per prompt, base: {cfg.base.model if cfg.base else 'none'}")
        run_dir = Path(out) if out else store.default_run_dir(config_path, root)
        if start and jobs.progress(run_dir).active:
            st.warning(f"A diagnosis into {run_dir} is already running.")
        elif start:
            try:
                jobs.start(config_path, run_dir)
                st.session_state["job"] = str(run_dir)
            except OpsdError as e:
                st.error(str(e))


def follow(run_dir: str, active: bool) -> None:
    p = jobs.progress(run_dir)
    if active and not p.active:
        st.rerun()  # the whole page, so the fragment stops polling
    st.progress(p.fraction, text=p.text)
    if p.error:
        st.error(p.error)
    if p.status == "finished":
        st.success(f"Finished: {run_dir}")
        if st.button("Open this run", key="open_run"):
            st.session_state["run_dir"] = run_dir
            st.switch_page("views/overview.py")
    with st.expander("Log", expanded=p.status in ("failed", "died")):
        st.code(p.log_tail or "(no output yet)")


job = st.session_state.get("job")
if job:
    st.subheader(f"Progress of {job}")
    argv = (job_protocol.read_status(job) or {}).get("argv")
    if argv:
        st.code(shlex.join(argv), language="bash")
    active = jobs.progress(job).active
    st.fragment(follow, run_every=2.0 if active else None)(job, active)
