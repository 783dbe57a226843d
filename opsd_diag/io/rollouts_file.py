"""Read a rollouts file (verl, slime, OpenRLHF, vLLM or our own JSON Lines) into rollouts matched to the problems.

Two steps: ``parse`` turns each line into one or more ``Record``s in our field names (``config.rollouts_file``
names the formats; docs/design.md#rollouts-from-a-file their fields), checking types, before any model loads;
``match`` ties each record to a problem of the data (by ``problem_id``, else by its prompt: the problem's
question, or the student's rendered view as text or ids), encodes text completions with the student's
tokenizer and checks ids, counts, lengths and temperatures against the config. Every malformed input is one
OpsdError naming the file, the line and the fix.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from opsd_diag.config.rollouts_file import FIELDS, RolloutsFileSpec
from opsd_diag.config.yamlfile import decode, read_bytes
from opsd_diag.errors import OpsdError
from opsd_diag.io import safe

TEMPERATURE_TOL = 1e-6


@dataclass
class Record:
    """One rollout as the file gives it, in our names (None: the file does not say)."""
    line: int
    problem_id: str | None = None
    prompt: str | list | None = None          # text, or chat messages
    prompt_ids: list[int] | None = None
    completion: str | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None       # the sampler's log-prob of each completion token
    temperature: float | None = None
    finished: bool | None = None


@dataclass(frozen=True)
class Matched:
    """A record tied to problem ``index``; ``prompt``: how its prompt relates to the student's view (``view``:
    the same ids or text, ``question``: the bare question, ``differs``: other ids than the view's)."""
    line: int
    index: int
    ids: list[int]
    finished: bool
    logprobs: list[float] | None
    prompt: str


def _fail(where: str, what: str) -> OpsdError:
    return OpsdError(f"{where}: {what}")


def _ints(v, where: str, key: str) -> list[int]:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise _fail(where, f"'{key}' must be a list of token ids (integers)")
    return v


def _floats(v, where: str, key: str) -> list[float]:
    if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        raise _fail(where, f"'{key}' must be a list of numbers (the sampler's log-prob of each completion token)")
    if not all(math.isfinite(x) and x <= 1e-6 for x in v):
        raise _fail(where, f"'{key}' holds a value that is not a finite log-prob <= 0 (NaN, inf or positive)")
    return [float(x) for x in v]


def _text(v, where: str, key: str) -> str:
    if not isinstance(v, str):
        raise _fail(where, f"'{key}' must be text")
    return v


def _prompt(v, where: str, key: str):
    if isinstance(v, list) and v and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in v):
        return v
    if isinstance(v, str):
        return v
    raise _fail(where, f"'{key}' must be text or a list of chat messages {{\"role\", \"content\"}}")


def _number(v, where: str, key: str) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
        raise _fail(where, f"'{key}' must be a positive number (the sampling temperature)")
    return float(v)


def _vllm_logprobs(v, ids: list[int] | None, where: str) -> list[float] | None:
    """vLLM's per-position log-probs: numbers, or {token id: {"logprob": x} or x} holding the sampled id."""
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(d, dict) for d in v):
        return _floats(v, where, "logprobs")
    if ids is None or len(ids) != len(v):
        raise _fail(where, "'logprobs' must have one entry per id in 'token_ids'")
    out = []
    for pos, (t, d) in enumerate(zip(ids, v)):
        e = d.get(str(t), d.get(t)) if isinstance(d, dict) else None
        e = e.get("logprob") if isinstance(e, dict) else e
        if e is None:
            raise _fail(where, f"'logprobs' at position {pos} does not hold the sampled token {t}")
        out.append(e)
    return _floats(out, where, "logprobs")


def _finish_reason(v, where: str) -> bool | None:
    if v is None:
        return None
    if v in ("stop", "eos", "completed", "COMPLETED", "Status.COMPLETED"):
        return True
    if v in ("length", "truncated", "TRUNCATED", "Status.TRUNCATED"):
        return False
    raise _fail(where, f"unknown finish reason {str(v)[:40]!r}: use stop or length (completed or truncated); "
                       "an aborted sample is no rollout: remove it")


def _opsd(row: dict, where: str, n: int, fields: dict[str, str]) -> list[Record]:
    get = {f: row.get(fields.get(f, f)) for f in FIELDS}
    key = {f: fields.get(f, f) for f in FIELDS}
    r = Record(n)
    if get["problem_id"] is not None:
        if not isinstance(get["problem_id"], (str, int)) or isinstance(get["problem_id"], bool):
            raise _fail(where, f"'{key['problem_id']}' must be text or an integer")
        r.problem_id = str(get["problem_id"])
    r.prompt = None if get["prompt"] is None else _prompt(get["prompt"], where, key["prompt"])
    r.prompt_ids = None if get["prompt_ids"] is None else _ints(get["prompt_ids"], where, key["prompt_ids"])
    r.completion = None if get["completion"] is None else _text(get["completion"], where, key["completion"])
    r.completion_ids = (None if get["completion_ids"] is None
                        else _ints(get["completion_ids"], where, key["completion_ids"]))
    r.logprobs = None if get["logprobs"] is None else _floats(get["logprobs"], where, key["logprobs"])
    r.temperature = None if get["temperature"] is None else _number(get["temperature"], where, key["temperature"])
    if get["finished"] is not None and not isinstance(get["finished"], bool):
        raise _fail(where, f"'{key['finished']}' must be true or false")
    r.finished = get["finished"]
    if r.completion is None and r.completion_ids is None:
        raise _fail(where, f"no completion: give '{key['completion']}' (text) or '{key['completion_ids']}' "
                           "(token ids), or map yours with rollouts.fields")
    return [r]


def _vllm(row: dict, where: str, n: int) -> list[Record]:
    outs = row.get("outputs")
    if not isinstance(outs, list) or not outs or not all(isinstance(o, dict) for o in outs):
        raise _fail(where, "'outputs' must be a non-empty list of completions {\"text\", \"token_ids\", ...}")
    base = _opsd({k: row.get(k) for k in ("problem_id", "prompt", "temperature")}
                 | {"prompt_ids": row.get("prompt_token_ids"), "completion": ""}, where, n, {})[0]
    recs = []
    for o in outs:
        ids = None if o.get("token_ids") is None else _ints(o["token_ids"], where, "token_ids")
        text = None if o.get("text") is None else _text(o["text"], where, "text")
        if ids is None and text is None:
            raise _fail(where, "an output has neither 'token_ids' nor 'text'")
        recs.append(Record(n, base.problem_id, base.prompt, base.prompt_ids, text, ids,
                           _vllm_logprobs(o.get("logprobs"), ids, where), base.temperature,
                           _finish_reason(o.get("finish_reason"), where)))
    return recs


def _slime(row: dict, where: str, n: int) -> list[Record]:
    tokens, length, prompt_ids, ids = row.get("tokens"), row.get("response_length"), None, None
    if tokens is not None:
        tokens = _ints(tokens, where, "tokens")
        if not isinstance(length, int) or isinstance(length, bool) or not 0 < length <= len(tokens):
            raise _fail(where, "'response_length' must be the number of response ids at the end of 'tokens'")
        prompt_ids, ids = tokens[:-length], tokens[-length:]
    r = _opsd({k: row.get(k) for k in ("problem_id", "prompt", "temperature")}
              | {"completion": row.get("response"), "completion_ids": ids, "prompt_ids": prompt_ids,
                 "logprobs": row.get("rollout_log_probs")}, where, n, {})[0]
    r.finished = _finish_reason(row.get("status"), where)
    return [r]


def _text_pairs(row: dict, where: str, n: int) -> list[Record]:
    if not isinstance(row.get("output"), str):
        raise _fail(where, "'output' (the completion text) is missing or not text")
    return _opsd({"prompt": row.get("input"), "completion": row["output"],
                  "problem_id": row.get("problem_id")}, where, n, {})


def detect(row: dict) -> str:
    """The format of a record, from its keys."""
    if "outputs" in row:
        return "vllm"
    if "response_length" in row or "rollout_log_probs" in row:
        return "slime"
    if "input" in row and "output" in row:
        return "verl"
    return "opsd"


def parse(spec, key: str = "rollouts") -> list[Record]:
    """Every record of the file at ``spec.path`` (``config.rollouts_file.RolloutsFileSpec``), checked by type."""
    path = safe.check_path(spec.path, f"{key}.path")
    text = decode(read_bytes(path, "rollouts", f"set {key}.path to a JSON Lines file of rollouts"), path, "rollouts")
    fmt, records = spec.format, []
    for n, line in enumerate(text.split("\n"), start=1):  # records end at '\n' only (U+2028 may sit in a string)
        if not line.strip():
            continue
        where = f"{path} line {n}"
        try:
            row = safe.parse_json(line, where)
        except json.JSONDecodeError as e:
            raise OpsdError(f"{where} is not valid JSON ({e.msg}): each line must be one rollout record") from None
        if not isinstance(row, dict):
            raise OpsdError(f"{where} is not a JSON object: each line must be one rollout record")
        if fmt == "auto":
            fmt = detect(row)
        kind = {"vllm": _vllm, "slime": _slime, "verl": _text_pairs, "openrlhf": _text_pairs}.get(fmt)
        records += kind(row, where, n) if kind else _opsd(row, where, n, spec.fields)
    if not records:
        raise OpsdError(f"{path} holds no rollouts: write one JSON record per line "
                        "(docs/design.md#rollouts-from-a-file)")
    return records


def _question(prompt) -> str:
    """A problem's (or a record's) question text: the text itself, or the last user message's content."""
    if isinstance(prompt, str):
        return prompt.strip()
    users = [m["content"] for m in prompt if m.get("role") == "user"] or [prompt[-1]["content"]]
    return users[-1].strip()


def _lookup(problems, views, tok) -> tuple[dict, dict, dict]:
    """Problems by id, by the student's view ids, and by text (the question; the view decoded with and without
    special tokens, as verl and OpenRLHF write it)."""
    by_text: dict[str, tuple[int, str]] = {}
    for i, (p, v) in enumerate(zip(problems, views)):
        by_text.setdefault(_question(p["prompt"]), (i, "question"))
        for skip in (True, False):
            by_text[tok.decode(v, skip_special_tokens=skip).strip()] = (i, "view")
    return {p["id"]: i for i, p in enumerate(problems)}, {tuple(v): i for i, v in enumerate(views)}, by_text


def _locate(r: Record, where: str, tables: tuple[dict, dict, dict], tok) -> tuple[int, str]:
    """(problem index, how the prompt relates to the student's view) of record ``r``."""
    by_id, by_ids, by_text = tables
    if r.prompt_ids is not None and tuple(r.prompt_ids) in by_ids:
        i, how = by_ids[tuple(r.prompt_ids)], "view"
    else:
        text = r.prompt if r.prompt is not None else (None if r.prompt_ids is None else tok.decode(r.prompt_ids))
        hit = None if text is None else by_text.get(text.strip() if isinstance(text, str) else _question(text))
        if r.problem_id is not None:
            if r.problem_id not in by_id:
                raise _fail(where, f"problem_id '{r.problem_id[:60]}' is not in the data (data.path): diagnose the "
                                   "problem set the rollouts were sampled on")
            i = by_id[r.problem_id]
            if text is not None and (hit is None or hit[0] != i):
                raise _fail(where, f"its prompt is not problem '{r.problem_id[:60]}''s in the data (data.path): "
                                   "the file and the problem set disagree")
            how = "view" if hit is not None and hit[1] == "view" else "question"
        elif hit is not None:
            i, how = hit
        elif text is None:
            raise _fail(where, "no problem_id and no prompt: give one so the rollout can be matched to a problem")
        else:
            shown = text if isinstance(text, str) else _question(text)
            raise _fail(where, f"its prompt {shown.strip()[:60]!r} matches no problem in the data (data.path): "
                               "diagnose the problem set the rollouts were sampled on")
        if r.prompt_ids is not None:
            how = "differs"
    return i, how


def match(records: list[Record], problems: list[dict], views: list[list[int]], tok, *, num_samples: int,
          max_length: int, temperature: float, stop_ids: list[int], vocab: int) -> list[list[Matched]]:
    """The records per problem (in the data's order; problems without rollouts get none), checked against the
    config: ``num_samples`` rollouts per problem, at most ``max_length`` ids each, every id below ``vocab``,
    drawn at ``temperature``."""
    out: list[list[Matched]] = [[] for _ in problems]
    tables = _lookup(problems, views, tok)
    for r in records:
        where = f"rollouts file line {r.line}"
        if r.temperature is not None and abs(r.temperature - temperature) > TEMPERATURE_TOL:
            raise _fail(where, f"sampled at temperature {r.temperature:g} but sampling.temperature is "
                               f"{temperature:g}: set sampling.temperature: {r.temperature:g} (it is the "
                               "temperature the student is scored at)")
        i, how = _locate(r, where, tables, tok)
        ids = r.completion_ids
        if ids is None:
            ids = tok.encode(r.completion, add_special_tokens=False)
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise _fail(where, f"token id {bad[0]} is outside the student's vocabulary (0..{vocab - 1}): the "
                               "rollouts were sampled with another tokenizer")
        if not ids:
            raise _fail(where, "the completion is empty: a rollout needs at least one token")
        if len(ids) > max_length:
            raise _fail(where, f"the completion has {len(ids)} tokens, more than sampling.max_completion_length "
                               f"{max_length}: raise it to the longest completion")
        if r.logprobs is not None:
            if r.completion_ids is None:
                raise _fail(where, "log-probs need the sampled token ids: give completion_ids with them")
            if len(r.logprobs) != len(ids):
                raise _fail(where, f"{len(r.logprobs)} log-probs for {len(ids)} completion ids: give one per id")
        stop = ids[-1] in stop_ids
        finished = r.finished if r.finished is not None else stop or (r.completion_ids is None and
                                                                      len(ids) < max_length)
        out[i].append(Matched(r.line, i, list(ids), bool(finished), r.logprobs, how))
    counts = {len(m) for m in out if m}
    if len(counts) > 1 or num_samples not in counts:
        seen = ", ".join(str(c) for c in sorted(counts))
        raise OpsdError(f"the rollouts file has {seen} rollouts per problem but sampling.num_samples is {num_samples}:"
                        f" give every problem the same number and set sampling.num_samples to it")
    return out


def checked(cfg, path: str | None = None):
    """``cfg`` with its rollouts file replaced by ``path`` (``--rollouts``) when given, the file parsed once (a
    malformed line fails before any model loads)."""
    if path:
        spec = cfg.rollouts.model_copy(update={"path": path}) if cfg.rollouts else RolloutsFileSpec(path=path)
        cfg = cfg.model_copy(update={"rollouts": spec})
    parse(cfg.rollouts)
    return cfg
