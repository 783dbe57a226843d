"""Comparisons of stored results made on another machine (golden runs, committed reports).

Two CPUs can round one float32 sum differently (another SIMD width, another BLAS kernel), so a
result computed here and one stored from elsewhere agree to float32 tolerance, not bit for bit.
What is exact stays exact: ids, text, counts, booleans. What is a float is compared with
``RTOL``/``ATOL``, element by element inside list-valued columns, and numbers printed inside text
to the precision they were printed with. A ranking may differ only by swaps of entries whose
scores are within that tolerance of each other. docs/design.md (conventions) says the same.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

RTOL, ATOL = 1e-4, 1e-5


def close(a: float, b: float, rtol: float = RTOL, atol: float = ATOL) -> bool:
    """|a - b| <= atol + rtol |a|, with NaN equal to NaN (a missing estimate on both sides)."""
    if a is None or b is None:
        return a is b
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= atol + rtol * abs(a)


def assert_tree_close(a, b, rtol: float = RTOL, atol: float = ATOL, where: str = "") -> None:
    """Two JSON-like trees (a committed analysis and the same computed here): the same keys, lengths, text and
    integers exactly; floats within tolerance."""
    if isinstance(a, dict) or isinstance(b, dict):
        assert isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            assert_tree_close(a[k], b[k], rtol, atol, f"{where}/{k}")
    elif isinstance(a, list) or isinstance(b, list):
        assert isinstance(a, list) and isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_tree_close(x, y, rtol, atol, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert not isinstance(a, bool) and not isinstance(b, bool) and close(a, b, rtol, atol), (where, a, b)
    else:
        assert a == b, (where, a, b)


def _cell_equal(a, b, rtol: float, atol: float) -> bool:
    if isinstance(a, (list, tuple, np.ndarray)) or isinstance(b, (list, tuple, np.ndarray)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            return bool(np.allclose(b.astype(float), a.astype(float), rtol=rtol, atol=atol, equal_nan=True))
        return bool(np.array_equal(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return close(a, b, rtol, atol)
    return str(a) == str(b)


def assert_frames_close(old: pd.DataFrame, new: pd.DataFrame, skip: tuple[str, ...] = (),
                        rtol: float = RTOL, atol: float = ATOL) -> None:
    """Same columns and rows; float columns (and floats inside list cells) to tolerance, the rest exact."""
    assert list(old.columns) == list(new.columns), (list(old.columns), list(new.columns))
    assert len(old) == len(new), (len(old), len(new))
    for c in old.columns:
        if c in skip:
            continue
        if old[c].dtype.kind == "f" or new[c].dtype.kind == "f":
            np.testing.assert_allclose(new[c].to_numpy(float), old[c].to_numpy(float), rtol=rtol, atol=atol, err_msg=c)
            continue
        bad = [i for i, (a, b) in enumerate(zip(old[c], new[c])) if not _cell_equal(a, b, rtol, atol)]
        assert not bad, f"column {c}: {len(bad)} rows differ, first row {bad[0]}: {old[c].iloc[bad[0]]!r} " \
                        f"vs {new[c].iloc[bad[0]]!r}"


_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def text_close(old: str, new: str, rtol: float = RTOL, atol: float = ATOL) -> bool:
    """Equal text around numbers; integers (counts) exact; each decimal number equal to tolerance or
    to one unit of its last printed digit (0.0345 and 0.0346 are one rounding apart)."""
    if _NUMBER.split(old) != _NUMBER.split(new):
        return False
    for a, b in zip(_NUMBER.findall(old), _NUMBER.findall(new)):
        if not re.search(r"[.eE]", a + b):
            if a != b:
                return False
            continue
        mantissa = re.split(r"[eE]", a)[0]
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        exponent = int(re.split(r"[eE]", a)[1]) if re.search(r"[eE]", a) else 0
        unit = 10.0 ** (exponent - decimals)
        if not (close(float(a), float(b), rtol, atol) or abs(float(a) - float(b)) <= unit * (1 + 1e-9)):
            return False
    return True


def ranking_mismatch(old: list[dict], new: list[dict], rtol: float = RTOL, atol: float = ATOL) -> str | None:
    """Why two rankings of (config, signal, verdict, score) entries differ beyond float noise, or None.

    Allowed: each entry's score moved within tolerance, and two entries trading places when their
    scores are within tolerance of each other (a tie that another CPU breaks the other way).
    Anything else fails: another verdict, an entry missing, or a pair reordered that is further apart.
    """
    key = lambda e: (e["config"], e["signal"])  # noqa: E731
    old_by, new_by = {key(e): e for e in old}, {key(e): e for e in new}
    if len(old_by) != len(old) or len(new_by) != len(new):
        return "a (config, signal) appears twice"
    if set(old_by) != set(new_by):
        return f"different entries: only old {sorted(set(old_by) - set(new_by))}, only new {sorted(set(new_by) - set(old_by))}"
    for k, e in old_by.items():
        if e["verdict"] != new_by[k]["verdict"]:
            return f"{k}: verdict {e['verdict']} became {new_by[k]['verdict']}"
        if not close(e.get("score"), new_by[k].get("score"), rtol, atol):
            return f"{k}: score {e.get('score')} became {new_by[k].get('score')}"
    new_pos = {key(e): i for i, e in enumerate(new)}
    for i, a in enumerate(old):
        for b in old[i + 1:]:
            if new_pos[key(a)] > new_pos[key(b)]:  # a was ahead of b and is now behind it
                sa, sb = a.get("score"), b.get("score")
                if a["verdict"] != b["verdict"] or not close(sa, sb, rtol, atol):
                    return f"{key(a)} (score {sa}) and {key(b)} (score {sb}) swapped, and their scores are not tied"
    return None


def assert_topk_close(ref_values, ref_ids, values, ids, rtol: float = RTOL, atol: float = ATOL) -> None:
    """Two top-k tables equal up to ties: values to tolerance, position by position; an id may
    differ only where its value ties another within tolerance (the same id in another place, or the
    boundary k-th value), which two summation orders can break either way."""
    ref_values, ref_ids, values, ids = (np.asarray(x) for x in (ref_values, ref_ids, values, ids))
    assert ref_ids.shape == ids.shape, (ref_ids.shape, ids.shape)
    np.testing.assert_allclose(values, ref_values, rtol=rtol, atol=atol)
    for n in range(ids.shape[0]):
        if np.array_equal(ids[n], ref_ids[n]):
            continue
        ref = dict(zip(ref_ids[n].tolist(), ref_values[n].tolist()))
        for i, v in zip(ids[n].tolist(), values[n].tolist()):
            tied = close(ref[i], v, rtol, atol) if i in ref else close(float(ref_values[n].min()), v, rtol, atol)
            assert tied, f"row {n}: id {i} (value {v}) is not tied with the reference's top-k {ref}"


def rank_bounds(row, y: int, tol: float) -> tuple[int, int]:
    """The counts of tokens strictly better than token y that float noise of size tol allows:
    (those better by more than tol, those better by more than -tol)."""
    row = np.asarray(row, dtype=float)
    return int((row > row[y] + tol).sum()), int((row > row[y] - tol).sum()) - 1  # y itself is within -tol


def assert_topk_frames_close(old: pd.DataFrame, new: pd.DataFrame, rtol: float = RTOL, atol: float = ATOL) -> None:
    """A stored top-k table (one row per rank; token_id, logprob) equal to another up to tied log-probs."""
    assert_frames_close(old, new, skip=("token_id",), rtol=rtol, atol=atol)
    keys = [c for c in old.columns if c not in ("rank", "token_id", "logprob")]
    for (_, a), (_, b) in zip(old.groupby(keys, sort=False), new.groupby(keys, sort=False)):
        assert_topk_close(a["logprob"].to_numpy()[None], a["token_id"].to_numpy()[None],
                          b["logprob"].to_numpy()[None], b["token_id"].to_numpy()[None], rtol, atol)
