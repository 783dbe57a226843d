"""Tokens: one rollout under one or several configs (stacked), coloured by a signal, with hover details,
filters, "jump to where the configs disagree most", exports, the token table and the token-type view."""

import pandas as pd
import streamlit as st

from app import common
from opsd_diag.errors import OpsdError
from opsd_diag.report import export

run = common.require_run()
st.title("Tokens")
rollouts, configs = run.rollouts, run.configs
if rollouts.empty or not configs:
    st.info("This run has no scored tokens.")
    st.stop()

c1, c2, c3 = st.columns([2, 1, 1])
chosen = c1.multiselect("Teacher configs (stacked)", configs, default=[run.top_config()], key="tok_configs",
                        help="the first is the top-ranked config of the verdict")
with c2:
    signal = common.signal_select("tok_signal")
scope = c3.radio("Colour scale", ["rollout", "run"], horizontal=True, key="tok_scale",
                 format_func={"rollout": "per rollout", "run": "per run"}.get,
                 help="saturate at the 95th percentile of |signal| in this rollout, or in the whole run")
chosen = chosen or [run.top_config()]

f1, f2, f3 = st.columns([1, 1, 2])
which = f1.radio("Rollouts", ["all", "correct", "incorrect"], horizontal=True, key="tok_correct")
bins = list(next(iter(run.summary.configs.values())).by_entropy_bin) if run.summary.configs else []
entropy_bin = f2.selectbox("Student-entropy bin", ["all", *bins], key="tok_bin",
                           help="fade the tokens outside this bin (student entropy, nats)")
search = f3.text_input("Text search", key="tok_search", placeholder="only rollouts whose text contains …")

keep = rollouts
if which != "all":
    keep = keep[keep["correct"].fillna(not (which == "correct")).astype(bool) == (which == "correct")]
if search:
    keep = keep[keep["text"].astype(str).str.contains(search, case=False, regex=False)]
if keep.empty:
    st.warning("No rollout matches these filters.")
    st.stop()
labels = {int(r.rollout_id): f"{r.rollout_id}: {r.problem_id} #{r.sample_idx} "
          f"({'unchecked' if pd.isna(r.correct) else 'correct' if r.correct else 'incorrect'})"
          for r in keep.itertuples()}
ids = list(labels)
focus = st.session_state.pop("tok_focus", None)  # a link from Evidence or a disagreement row: (rollout, position)
if focus is not None:
    if focus[0] in ids:
        st.session_state["tok_rollout"], st.session_state["tok_focus_at"] = focus
    else:
        st.warning(f"Rollout {focus[0]} is hidden by the filters above: clear them to see it.")
if st.session_state.get("tok_rollout") not in ids:
    st.session_state["tok_rollout"] = ids[0]

hot = set()
if len(chosen) > 1:
    if st.button("Jump to the tokens where these configs disagree most", key="tok_jump"):
        top = run.disagreement(signal, chosen, n=50)
        top = top[top["rollout_id"].isin(ids)]
        if not top.empty:
            st.session_state["tok_rollout"] = int(top["rollout_id"].iloc[0])
rid = st.selectbox("Rollout", ids, format_func=labels.get, key="tok_rollout")
if len(chosen) > 1:
    here = run.disagreement(signal, chosen, n=10, rollout=rid)
    hot = set(here["pos"].astype(int)) if not here.empty else set()
at = st.session_state.get("tok_focus_at")
if at is not None and st.session_state.get("tok_rollout") == rid:
    hot = hot | {int(at)}
    st.caption(f"Marked: position {at}, the token the link pointed to.")

common.tokenizer(run)  # the note when top-k alternatives can only be shown as ids
st.html(common.heatmap(run, rid, chosen, signal, scale=scope, entropy_bin=None if entropy_bin == "all" else entropy_bin,
                       hot=hot))
st.caption("Hover a token for all its signals and the student/teacher top-k alternatives (underlined: the sampled "
           "token); the table appears to the right, level with the token. " + ("Outlined: the 10 tokens where the "
           "configs differ most on this signal. " if hot else "") + "· marks a space, ⏎ a line break.")
if len(chosen) > 1:
    with st.expander("Where the configs disagree most"):
        st.dataframe(run.disagreement(signal, chosen, n=10, rollout=rid), hide_index=True)
        top = run.disagreement(signal, chosen, n=20)
        top = top[top["rollout_id"].isin(ids)]
        if not top.empty:
            rows = list(top.itertuples(index=False))
            pick = st.selectbox("A disputed token of the whole run", range(len(rows)), key="tok_dispute",
                                format_func=lambda i: f"rollout {rows[i].rollout_id}, position {rows[i].pos}: "
                                                      f"{rows[i].token!r} (spread {rows[i].spread:.3f})")
            if st.button("Show its heatmap", key="tok_dispute_go"):
                st.session_state["tok_focus"] = (int(rows[pick].rollout_id), int(rows[pick].pos))
                st.rerun()

stem = f"{run.path.name}-rollout{rid}-{signal}"
e1, e2, e3 = st.columns(3)
with e1:
    common.download("Heatmap HTML", common.heatmap(run, rid, chosen, signal, scale=scope, fmt="html"),
                    f"{stem}.html", "tok_dl_html", "text/html")
if export.image_export_available():
    if e2.button("Render PNG and SVG", key="tok_render"):
        try:
            st.session_state["tok_img"] = ((rid, tuple(chosen), signal, scope), {
                f: run.export_heatmap(rid, chosen, signal, f, scale=scope) for f in export.IMAGE_FORMATS})
        except OpsdError as e:
            st.error(common.plain(str(e)))
    shown, images = st.session_state.get("tok_img") or (None, {})
    if shown == (rid, tuple(chosen), signal, scope):
        with e3:
            for fmt, data in images.items():
                common.download(f"Heatmap {fmt.upper()}", data, f"{stem}.{fmt}", f"tok_dl_{fmt}")
else:
    e2.caption("PNG and SVG need kaleido and Chromium: `make app` installs kaleido; "
               "install Chromium with your system's package manager (e.g. apt-get install chromium).")

row, tokens, _ = run.rollout(rid, chosen[0])
with st.expander("Completion text and answer"):
    st.text(row["text"])
    answer = row["answer_pred"]
    answer = "none found (the checker saw no final answer)" if answer is None or pd.isna(answer) else answer
    correct = "unchecked" if pd.isna(row["correct"]) else bool(row["correct"])
    st.write(f"predicted answer: {common.md(answer)} · correct: {correct}")
st.dataframe(tokens.drop(columns=["rollout_id", "config"]), hide_index=True, key="tok_table")

st.subheader("Token types")
t1, t2 = st.columns([2, 1])
tt_config = t1.selectbox("Config", configs, index=configs.index(chosen[0]), key="tt_config")
min_count = t2.number_input("At least this many occurrences", 1, 10_000, 5, key="tt_min")
types = run.token_types(signal, tt_config, int(min_count))
if types.empty:
    st.info("No token string occurs that often under this config.")
else:
    from opsd_diag.report.tables import token_types_figure

    st.plotly_chart(token_types_figure(types, signal, tt_config), key="tt_fig")
    st.caption(f"Which token strings {signal} pushes up (mean > 0) or down most, over every occurrence in the run "
               "under this config (the word-level view of OPD²); click a column to sort the table.")
    st.dataframe(types, hide_index=True, key="tt_table", column_config={
        "mean": st.column_config.NumberColumn(format="%.4f"), "total": st.column_config.NumberColumn(format="%.3f")})
