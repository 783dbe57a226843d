"""Tokens: one rollout coloured by a per-token signal, with hover details and the table."""

import pandas as pd
import streamlit as st

from app import common

run = common.require_run()
st.title("Tokens")
rollouts, configs = run.rollouts, run.configs
if rollouts.empty or not configs:
    st.info("This run has no scored tokens.")
    st.stop()

c1, c2, c3 = st.columns([1, 2, 1])
config = c1.selectbox("Teacher config", configs, key="tok_config")
labels = {int(r.rollout_id): f"{r.rollout_id}: {r.problem_id} #{r.sample_idx} "
          f"({'unchecked' if pd.isna(r.correct) else 'correct' if r.correct else 'incorrect'})"
          for r in rollouts.itertuples()}
rid = c2.selectbox("Rollout", list(labels), format_func=labels.get, key="tok_rollout")
with c3:
    signal = common.signal_select("tok_signal")

st.html(run.heatmap(rid, [config], signal, common.tokenizer(run)))
st.caption("Hover a token for all its signals and the student/teacher top-k alternatives "
           "(underlined: the sampled token). Red: below 0, blue: above 0.")

row, tokens, _ = run.rollout(rid, config)
with st.expander("Completion text and answer"):
    st.text(row["text"])
    st.write(f"predicted answer: {row['answer_pred']} · correct: {row['correct']}")
st.dataframe(tokens.drop(columns=["rollout_id", "config"]), hide_index=True)
