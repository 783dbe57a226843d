"""Train: a verdict's (config, signal) or a config file, started as a job; follow, stop and resume it.

Everything goes through the job protocol (``opsd_diag.jobs``: argv lists, a new process group,
the run directory as the only shared state), so a run started here can also be followed from
another session or stopped from a terminal with ``touch RUN_DIR/STOP``. A run started from a
diagnosis keeps its prediction (``prediction.json``) and appears on the Track record page.
"""

import shlex
from pathlib import Path

import pandas as pd
import streamlit as st

from app import common, estimate, launch, training_figures, workbench
from app import jobs as app_jobs
from opsd_diag import jobs, scoreboard
from opsd_diag.errors import OpsdError
from opsd_diag.config.levers import CANDIDATES, named_mask
from opsd_diag.config.spec import DataSpec
from opsd_diag.io.data import load_problems
from trainer import from_diagnosis
from trainer.cli import reveal_schedule

st.title("Train")
root = Path(st.session_state.get("runs_root", "runs"))
wanted = st.session_state.get("train_this")
mode = st.radio("Train", ["verdict", "file"], horizontal=True, key="train_mode", index=0 if wanted else 1,
                format_func={"verdict": "a diagnosed (config, signal)", "file": "a config file"}.get)


def held_out_count(path: str) -> int:
    """Problems in the held-out file (0 when it cannot be read: the start says why)."""
    if not path:
        return 0
    try:
        return len(load_problems(DataSpec(path=path)))
    except (OpsdError, ValueError, OSError):
        return 0


def training_cost(run, over: dict, eval_problems: int, eval_steps: int) -> None:
    """The cost of the run: step tokens and evaluated samples (counted), seconds (timed from a past run)."""
    length = run.config.sampling.max_completion_length
    w = estimate.work(over["max_steps"], over["batch_size"], length, eval_problems, over["eval_samples"] or 0,
                      eval_steps)
    est = estimate.estimate(w, root)
    cols = st.columns(4)
    cols[0].metric("Sampled tokens while stepping (at most)", f"{w['step_tokens']:,}")
    cols[1].metric("Held-out samples", f"{w['eval_samples']:,}", help=f"{w['evaluations']} evaluations × "
                   f"{eval_problems} problems × {over['eval_samples'] or 0} samples")
    cols[2].metric("Estimated steps", workbench.duration(est["step_s"]))
    cols[3].metric("Estimated evaluation", workbench.duration(est["eval_s"]))
    st.caption(f"Timed from {est['timed_from']} (this machine): {est['step_token_s'] * 1e3:.2f} ms per sampled step "
               f"token, {est['eval_sample_s']:.2f} s per held-out sample; the step count is an upper bound (every "
               "completion at full length)." if est["timed_from"] else
               "No finished training run with timed evaluations to time from yet: the time appears after the first.")


def token_mask_field(run, config: str, method: str | None) -> str | None:
    """The token mask to train with, pre-filled with the diagnosis' lever recommendation when it was made for
    this (config, method) (``lookahead.levers``); None keeps the config's own mask."""
    lv = run.summary.levers or {}
    rec = (lv.get("recommendation") or {}).get("setting")
    here = lv.get("config") == config and lv.get("method") == method and rec in CANDIDATES
    names = ["(the config's own)", *CANDIDATES]
    pick = st.selectbox("Token mask (where the signal is placed)", names, index=names.index(rec) if here else 0,
                        key=f"tt_mask-{config}-{method}",
                        help="pre-filled with the diagnosis' lever recommendation for this config and method"
                        if here else "the diagnosis made no lever recommendation for this config and method")
    if here:
        st.caption(f"Token mask pre-filled with the diagnosis' lever recommendation: {rec}.")
    return None if pick == names[0] else pick


def reveal_field(run, config: str, method: str | None) -> float | None:
    """The share of the solution a self-teacher sees (``training.context_schedule`` fixed), pre-filled with the
    diagnosis' schedule recommendation when it was made for this (config, loss) (``lookahead.schedule_points``);
    None keeps the config's own schedule. Shown only for a self-teacher shown the solution."""
    from opsd_diag.engine.schedule_points import schedule_sources

    if config not in {t.name for t in schedule_sources(run.config)}:
        return None
    rec = (run.summary.schedule or {}).get("recommendation") or {}
    here = rec.get("source") == config and rec.get("method") == method and rec.get("share") is not None
    own = st.checkbox("Show the teacher a share of the solution (training.context_schedule, fixed)", value=here,
                      key=f"tt_reveal_on-{config}-{method}",
                      help="pre-filled with the diagnosis' schedule recommendation for this config and loss" if here
                      else "the diagnosis made no schedule recommendation for this config and loss")
    if not own:
        return None
    share = st.number_input("Share of the solution the teacher sees", 0.0, 1.0, float(rec["share"]) if here else 1.0,
                            step=0.05, key=f"tt_reveal-{config}-{method}")
    if here:
        st.caption(f"Share pre-filled with the diagnosis' schedule recommendation: {rec['share']:g}.")
    return float(share)


def from_verdict() -> None:
    diagnoses = [str(p) for p in jobs.find_runs(root, "diagnosis") if (p / "summary.json").is_file()]
    if wanted and common.canonical(wanted["run"]) not in diagnoses:
        diagnoses.insert(0, common.canonical(wanted["run"]))
    if not diagnoses:
        st.info("No finished diagnosis yet: start one on 'New diagnosis'.")
        return
    a, b, c = st.columns([3, 2, 1])
    run_dir = a.selectbox("Diagnosis", diagnoses, key="tt_run",
                          index=diagnoses.index(common.canonical(wanted["run"])) if wanted else 0)
    try:
        run = common.load(run_dir)
    except OpsdError as e:
        st.error(common.plain(str(e)))
        return
    configs = run.configs
    config = b.selectbox("Teacher config", configs, key="tt_config",
                         index=configs.index(wanted["config"]) if wanted and wanted["config"] in configs else 0)
    signals = from_diagnosis.trainable_signals(run.config, config)
    if wanted and wanted["config"] == config and wanted["signal"] not in signals:
        st.warning(f"{wanted['signal']} cannot be trained with {config}: "
                   f"{from_diagnosis.why_not(run.config, config, wanted['signal'])}. Pick one of its signals below.")
    signal = c.selectbox("Signal", signals, key="tt_signal", format_func=common.signal_name,
                         index=signals.index(wanted["signal"]) if wanted and wanted["signal"] in signals else 0)
    pred = from_diagnosis.prediction(run, config, signal)
    method = from_diagnosis.method_for(run.config, config, signal)
    st.markdown(f"**Method** {', '.join(f'{k} = {v}' for k, v in method.items())} · **predicted** "
                f"{common.md(pred['verdict'] or 'no verdict')}" + (f" (score {pred['score']:+.3f}): "
                                                                   f"{common.md(pred['reason'])}"
                                                        if pred["score"] is not None else ""))
    base = (run.config.training.model_dump() if run.config.training else {})
    a, b, c, d = st.columns(4)
    steps = a.number_input("Steps", 1, 1_000_000, int(base.get("max_steps") or 20) if base else 20, key="tt_steps")
    lr = b.number_input("Learning rate", 1e-8, 1.0, float(base.get("learning_rate") or 3e-4), format="%.2e",
                        key="tt_lr")
    batch = c.number_input("Prompts per step", 1, 4096, int(base.get("per_device_train_batch_size") or 8),
                           key="tt_batch")
    seed = d.number_input("Seed", 0, 2**31 - 1, 0, key="tt_seed")
    default_eval = "sample_data/problems/test.jsonl" if Path("sample_data/problems/test.jsonl").is_file() else ""
    eval_data = st.text_input("Held-out problems (scored at the start and the end: the realised gain)", default_eval,
                              key="tt_eval")
    n_held = held_out_count(eval_data)
    base_eval = (base.get("eval") or {}) if base else {}
    e1, e2 = st.columns(2)
    eval_n = e1.number_input("Held-out problems scored (first N)", 1, 1_000_000, max(1, min(n_held or 100, 100)),
                             key="tt_eval_n", help=f"the file holds {n_held} problems" if n_held else None)
    eval_k = e2.number_input("Samples per held-out problem", 1, 1024, int(base_eval.get("num_samples") or 4),
                             key="tt_eval_k", help="pass@1 is their mean; pass@k uses k = min(4, samples)")
    early = st.checkbox("Evaluate every quarter of the steps too", value=True, key="tt_early", disabled=not eval_data,
                        help="held-out pass@1 at the start and after every quarter of the steps: the evaluation "
                        "curves")
    eval_steps = -(-int(steps) // 4) if early and eval_data else int((base or {}).get("eval_steps") or 0)
    loss = method.get("loss") if method["method"] == "opsd" else method["method"]
    mask = token_mask_field(run, config, loss)
    reveal = reveal_field(run, config, loss)
    out = st.text_input("Run directory", key="tt_out", placeholder=f"{root}/train-{config}-{signal}-<time> (default)")
    over = {"max_steps": int(steps), "learning_rate": float(lr), "batch_size": int(batch), "seed": int(seed),
            "eval_data": eval_data or None, "eval_problems": int(eval_n) if eval_data else None,
            "eval_samples": int(eval_k) if eval_data else None,
            "eval_steps": (eval_steps or None) if eval_data else None,  # opsd-train refuses it with nothing to evaluate
            "token_mask": mask, "reveal": reveal}
    training_cost(run, over, min(int(eval_n), n_held) if eval_data and n_held else 0, eval_steps)
    with st.expander("The exact command and the config it trains (YAML)"):
        st.code(shlex.join(launch.from_diagnosis_command(run_dir, config, signal, out or f"{root}/train-…", **over)),
                language="bash")
        try:
            cfg = from_diagnosis.training_config(run, config, signal, max_steps=over["max_steps"],
                                                 learning_rate=over["learning_rate"],
                                                 per_device_train_batch_size=over["batch_size"], seed=over["seed"],
                                                 token_mask=named_mask(mask),
                                                 context_schedule=reveal_schedule(reveal))
            st.code(workbench.config_yaml(cfg), language="yaml")
        except OpsdError as e:
            st.error(common.plain(str(e)))
    if st.button("Start training", type="primary", key="tt_start"):
        try:
            common.check_fields({"held-out problems": eval_data, "run directory": out})
            job = launch.start_from_diagnosis(run_dir, config, signal, out or None, runs_root=root,
                                              env=app_jobs.env(), **over)
        except OpsdError as e:
            st.error(common.plain(str(e)))
        else:
            st.session_state["train_run"] = str(job.run_dir)
            st.session_state.pop("train_this", None)
            st.success(f"Started {job.run_dir}")


def from_file() -> None:
    config_path = st.text_input("Config file with a training section (YAML)",
                                value="sample_data/configs/train_opsd.yaml", key="train_config")
    c1, c2, c3 = st.columns([2, 1, 1])
    out = c1.text_input("Run directory", key="train_out", placeholder=f"{root}/train-<config name>-<time> (default)")
    processes = c2.number_input("Processes", min_value=1, max_value=64, value=1, key="train_procs",
                                help="more than one starts accelerate (one process per GPU)")
    resume = c3.checkbox("Resume", key="train_resume", help="continue the run in this directory from its last "
                                                            "checkpoint")
    if st.button("Start training", type="primary", key="train_start"):
        try:
            common.check_fields({"config file": config_path, "run directory": out})
            job = launch.start(config_path, out or None, num_processes=int(processes), resume=resume, runs_root=root,
                               env=app_jobs.env())
        except OpsdError as e:
            st.error(common.plain(str(e)))
        else:
            st.session_state["train_run"] = str(job.run_dir)
            st.success(f"Started {job.run_dir} (pid {job.pid})")


if mode == "verdict":  # a statement, not an expression: Streamlit's magic would print its value (None)
    from_verdict()
else:
    from_file()

st.subheader("Training runs")
runs = [str(p) for p in jobs.find_runs(root, "training")]
current = common.canonical(st.session_state.get("train_run"))
if current and current not in runs:
    runs.insert(0, current)
if not runs:
    st.info(f"No training runs under {root} yet.")
    st.stop()


def listing(paths: list[str]) -> None:
    rows = []
    for r in paths:
        s = jobs.status(r)  # from the run directory: the list survives a reload and an app restart
        pred = scoreboard.read_prediction(r) or {}
        rows.append({"run": Path(r).name, "status": s["status"], "step": s.get("step"), "of": s.get("max_steps"),
                     "method": s.get("method"), "from": f"{pred.get('config')} / {pred.get('signal')}" if pred else ""})
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="train_list")


st.fragment(listing, run_every=5.0)(runs)
if current and st.session_state.get("train_follow") != current and st.session_state.get("_followed") != current:
    st.session_state["train_follow"] = st.session_state["_followed"] = current
chosen = st.selectbox("Follow run", runs, key="train_follow")
c1, c2 = st.columns(2)
smoothing = c1.slider("Smoothing", 0.0, 0.99, 0.6, key="train_smooth", help="exponential moving average of the "
                                                                           "training curves")
log_y = c2.checkbox("Log scale", key="train_log")


def follow(run_dir: str) -> None:
    # Status, Stop and Resume live inside the fragment, so they change with the run without a reload.
    status = jobs.status(run_dir)
    state = status["status"]
    step, total = status.get("step") or 0, status.get("max_steps") or 0
    st.progress(min(1.0, step / total) if total else 0.0, text=f"{state}: step {step} of {total or '?'}")
    if state in jobs.ACTIVE and status.get("stage") == "evaluating":
        done, n = int(status.get("eval_done") or 0), int(status.get("eval_total") or 0)
        eta = app_jobs.eta(status.get("eval_started"), done, n)
        st.progress(min(1.0, done / n) if n else 0.0, text=f"evaluating the held-out problems at step "
                    f"{status.get('eval_step', step)}: {done} of {n} problems"
                    + (f", about {workbench.duration(eta)} left" if eta is not None else ""))
    elif state in jobs.ACTIVE and status.get("stage") == "saving":
        st.caption(f"saving a checkpoint at step {step}")
    argv = status.get("argv")
    if argv:
        st.code(shlex.join(argv), language="bash")
    if state in jobs.ACTIVE:
        if st.button("Stop (saves a checkpoint first)", key="train_stop"):
            jobs.stop(run_dir)
            st.rerun()
    elif state in ("stopped", "died", "failed"):
        if st.button("Resume", key="train_resume_run", help="continue from the last checkpoint"):
            try:
                launch.resume(run_dir, env=app_jobs.env())
            except OpsdError as e:
                st.error(common.plain(str(e)))
            st.rerun()
    if state == "failed":
        st.error(common.plain(status.get("error") or "the run failed: see its log below"))
    follower = st.session_state.setdefault("train_followers", {}).setdefault(run_dir, jobs.Follower(run_dir))
    follower.poll()  # reads only what was appended since the last refresh
    frame = training_figures.records_frame(follower.records)
    if (frame["kind"] == "train").any() if "kind" in frame else False:
        last = frame[frame["kind"] == "train"].iloc[-1]
        st.caption(f"step {last['step']:.0f}: loss {last.get('loss', float('nan')):.4f}")
        st.plotly_chart(training_figures.train_figure(frame, smoothing=smoothing, log_y=log_y), key=f"train-{run_dir}")
    if (frame["kind"] == "eval").any() if "kind" in frame else False:
        st.plotly_chart(training_figures.eval_figure(frame, scoreboard.read_prediction(run_dir)), key=f"eval-{run_dir}")
    with st.expander("Log", expanded=state in ("failed", "died")):
        st.code(jobs.log_tail(run_dir) or "(no output yet)")


st.fragment(follow, run_every=2.0)(chosen)
