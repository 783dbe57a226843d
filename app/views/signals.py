"""Signals: every figure of the run for one chosen signal."""

import streamlit as st

from app import common

run = common.require_run()
st.title("Signals")
c1, c2 = st.columns(2)
with c1:
    signal = common.signal_select("sig_signal")
configs = run.configs
default = common.default_alignment_config(run.tokens)
config = c2.selectbox("Config for the a_opd / a_delta scatter", configs,
                      index=configs.index(default) if default in configs else 0, key="sig_config")

for name, fig in run.figures(signal, config).items():
    st.plotly_chart(fig, key=f"fig_{name}")
    st.caption(common.FIGURE_HELP[name])
