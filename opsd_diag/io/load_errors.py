"""What a failed load of a user's files says: one sentence a user can act on, and no library noise before it.

A weights file that torch's safe loader refuses is a pickle that holds more than tensors (loading it
could run code): it is named and refused as such. A safetensors file whose header does not cover the
file is truncated or damaged. Anything else is the library's first sentence, never cut mid-word.
Library warnings raised during a load are held back: dropped when the load fails (the one error line
is all the user sees), shown after a load that succeeds, less the deprecation notices addressed to
the libraries' own developers.
"""

from __future__ import annotations

import contextlib
import pickle
import warnings
from pathlib import Path


def first_sentence(text: str, limit: int = 200) -> str:
    """The first line of a library's message up to its first full stop; a longer one ends at a word with '...'."""
    line = (str(text).strip().splitlines() or [""])[0].strip()
    end = line.find(". ")
    line = line[:end + 1] if end >= 0 else line
    return line if len(line) <= limit else line[:limit].rsplit(" ", 1)[0] + " ..."


def is_refused_pickle(e: BaseException) -> bool:
    return isinstance(e, pickle.UnpicklingError) or "Weights only load failed" in str(e)


def is_damaged_safetensors(e: BaseException) -> bool:
    return type(e).__name__ == "SafetensorError" or "deserializing header" in str(e)


def broken_safetensors(folder: Path) -> str | None:
    """The first ``*.safetensors`` file of ``folder`` whose header does not open (truncated or not one)."""
    from safetensors import safe_open

    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt"):
                pass
        except Exception:  # noqa: BLE001 - SafetensorError, OSError: the file is what is wrong
            return path.name
    return None


def describe(e: BaseException, folder: Path | None, pickles: str = "*.bin") -> str:
    """One clause saying what is wrong with the files in ``folder`` that ``e`` came from."""
    if is_refused_pickle(e):
        names = ", ".join(sorted(p.name for p in Path(folder).glob(pickles))) if folder else ""
        return (f"{names or 'its weights file'} is a pickle that holds more than tensors, so it was refused: "
                "unpickling it could run code")
    if is_damaged_safetensors(e):
        name = (broken_safetensors(folder) if folder else None) or "its safetensors file"
        return f"{name} is truncated or damaged (its header does not describe a complete safetensors file)"
    return f"{type(e).__name__}: {first_sentence(str(e))}" if not isinstance(e, OSError) else first_sentence(str(e))


@contextlib.contextmanager
def held_warnings():
    """Hold the warnings a load raises: none is shown when it fails; after a success, all but deprecations."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if not issubclass(w.category, (DeprecationWarning, FutureWarning)):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
