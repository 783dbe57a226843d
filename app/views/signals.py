"""Signals: every figure of the run for one chosen signal."""

import streamlit as st

from app import common
from opsd_diag.report import figures as viz

run = common.require_run()
st.title("Signals")
c1, c2 = st.columns(2)
with c1:
    signal = common.signal_select("sig_signal")
configs = list(run["summary"]["configs"])
default = viz.default_alignment_config(run["tokens"])
config = c2.selectbox("Config for the a_opd / a_delta scatter", configs,
                      index=configs.index(default) if default in configs else 0, key="sig_config")

for name, fig in viz.run_figures(run, signal, config).items():
    st.plotly_chart(fig, key=f"fig_{name}")
    st.caption(viz.FIGURE_HELP[name])
