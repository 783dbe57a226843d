"""The per-token table's columns: name, formula, meaning, dtype, written once (no torch here).

Scoring writes these columns, the aggregates read them, the store checks them, the app labels its
widgets and picks colour scales with them, and ``docs/signals.md`` is generated from them.
Notation: p student, q teacher, b base (softmax of logits / τ_score), y_t the sampled token.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    name: str
    formula: str
    meaning: str
    signed: bool = True  # values of both signs (a diverging colour scale); False: >= 0 or a rank / flag
    needs_base: bool = False  # NaN when the diagnosis has no base model
    dtype: str = "float32"


SIGNALS: tuple[Column, ...] = (
    Column("lp_s", "log p(y_t)", "student log-prob of the sampled token", signed=False),
    Column("lp_t", "log q(y_t)", "teacher log-prob of the sampled token", signed=False),
    Column("lp_b", "log b(y_t)", "base log-prob of the sampled token", signed=False, needs_base=True),
    Column("r_opd", "lp_t − lp_s", "OPD reward: the sampled-token reverse-KL reward"),
    Column("r_delta", "lp_t − lp_b", "OPD² delta reward: what the teacher's reasoning training changed",
           needs_base=True),
    Column("kl_rev", "KL(p‖q) = Σ_v p_v (log p_v − log q_v)", "full-vocabulary reverse KL, nats", signed=False),
    Column("kl_fwd", "KL(q‖p)", "full-vocabulary forward KL, nats", signed=False),
    Column("jsd", "β·KL(q‖m) + (1−β)·KL(p‖m), m = βq + (1−β)p",
           "generalised Jensen-Shannon divergence (β = 0 forward KL, β = 1 reverse KL), nats", signed=False),
    Column("a_opd", "r_opd − E_p[log q − log p] = r_opd + KL(p‖q)", "centred OPD advantage"),
    Column("a_delta", "r_delta − E_p[log q − log b]", "centred delta advantage (expectation under the student)",
           needs_base=True),
    Column("gate", "1[a_delta · a_opd > 0]", "OPD² joint conditioning: the delta acts where it agrees with OPD",
           signed=False, needs_base=True),
    Column("a_d2", "gate · a_delta", "OPD² advantage", needs_base=True),
    Column("a_ex", "λ(lp_t − lp_R) − (lp_s − lp_R)",
           "ExOPD advantage with reference R (the initial student, or the base)"),
    Column("h_s", "−Σ_v p_v log p_v", "student entropy, nats", signed=False),
    Column("h_t", "−Σ_v q_v log q_v", "teacher entropy, nats", signed=False),
    Column("h_b", "−Σ_v b_v log b_v", "base entropy, nats", signed=False, needs_base=True),
    Column("rank_t", "#{v : q_v > q(y_t)}", "rank of the sampled token under the teacher (0 = its top-1)",
           signed=False),
    Column("top1_agree", "1[argmax p = argmax q]", "student and teacher agree on the most likely token",
           signed=False),
    # k = core.signals.COMPAT_K (schema holds no torch; tests/test_signals.py keeps this text equal to it)
    Column("teachability", "Σ_{v ∈ top_k(p)} q_v, k = 5",
           "teachability (TA-OPD): the teacher's probability mass on the student's own top-5 tokens", signed=False),
    Column("topk_overlap", "#{v ∈ top_k(p) ∩ top_k(q)} / k, k = 5",
           "top-k overlap (Rethinking-OPD): the share of the student's top-5 tokens also in the teacher's",
           signed=False),
)
SIGNAL_COLUMNS: tuple[str, ...] = tuple(c.name for c in SIGNALS)
BASE_COLUMNS: tuple[str, ...] = tuple(c.name for c in SIGNALS if c.needs_base)
BY_NAME: dict[str, Column] = {c.name: c for c in SIGNALS}
# Columns added after runs were already written: a stored table without them still opens, and reads them as NaN
# (not measured), so runs of an older version keep working (io.store.read_table)
LATER_COLUMNS: dict[str, tuple[str, ...]] = {"tokens": ("teachability", "topk_overlap")}
# The key columns in front of the signals in tokens.parquet (one row per rollout x position x config)
TOKEN_KEYS: tuple[str, ...] = ("rollout_id", "config", "pos", "token_id", "token")
# Names a teacher config may not take: they collide with a column or with the student's view
# (``prompt_ids.student`` in rollouts.parquet)
RESERVED_NAMES: frozenset[str] = frozenset({*SIGNAL_COLUMNS, *TOKEN_KEYS, "student"})
# Config-level numbers with a bootstrap CI in summary.json, and the headline columns of the report
CI_COLUMNS: tuple[str, ...] = ("r_opd", "a_opd", "a_d2", "kl_rev", "jsd", "gate")
HEADLINE_COLUMNS: tuple[str, ...] = ("r_opd", "a_opd", "a_d2", "kl_rev", "jsd")


# The predictor's objectives (core.ideal, core.verdict, opsd-train --signal) spelled as the token columns above,
# so a signal has one name on every page
OBJECTIVE_COLUMN: dict[str, str] = {"rev_kl": "kl_rev", "fwd_kl": "kl_fwd"}


def signal_name(name: str) -> str:
    """The column name of a signal, also for a predictor objective (``rev_kl`` -> ``kl_rev``)."""
    return OBJECTIVE_COLUMN.get(name, name)


def label(name: str) -> str:
    """``name: meaning`` for widgets and axis titles (the name itself for anything else)."""
    c = BY_NAME.get(name)
    return f"{name}: {c.meaning}" if c else name


def markdown_table() -> str:
    """The column reference of ``docs/signals.md`` (a test keeps that file equal to this)."""
    rows = ["| column | formula | meaning |", "|---|---|---|"]
    rows += [f"| `{c.name}` | {c.formula} | {c.meaning}{' (NaN without a base model)' if c.needs_base else ''} |"
             for c in SIGNALS]
    return "\n".join(rows)


# What each stored table must hold, checked on every read (io.store.read_table): column -> kind
# (i integer, f number, s text, b flag, l list of token ids). Other columns may follow.
TABLE_COLUMNS: dict[str, dict[str, str]] = {
    "rollouts": {"rollout_id": "i", "problem_index": "i", "sample_idx": "i", "completion_ids": "l", "length": "i",
                 "finished": "b", "text": "s", "correct": "b"},
    "tokens": {"rollout_id": "i", "config": "s", "pos": "i", "token_id": "i", "token": "s",
               **{c: "f" for c in SIGNAL_COLUMNS if c not in LATER_COLUMNS["tokens"]}},
    "topk": {"rollout_id": "i", "pos": "i", "role": "s", "config": "s", "rank": "i", "token_id": "i", "logprob": "f"},
    "teacher_rollouts": {"config": "s", "sample_idx": "i", "correct": "b"},
    "nodes": {"node_id": "i", "config": "s", "rollout_id": "i", "pos": "i", "token_id": "i", "cand_ids": "l"},
    "acting_nodes": {"node_id": "i", "config": "s", "rollout_id": "i", "pos": "i", "token_id": "i", "cand_ids": "l",
                     "chosen": "b", "push": "f"},
}
