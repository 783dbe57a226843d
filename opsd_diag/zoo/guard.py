"""What a zoo build may write, checked before it writes anything, and the marker it leaves behind.

A build writes two folders, the models (``--out``) and the problem splits (``--problems-dir``). Each is a
new folder (absent or empty) or one that holds an earlier build of the same world, recognised by the
marker ``zoo_build.json`` the build writes into it (world, size, seed, what the folder holds). Any other
folder (another world's, a folder of the user's) is refused unless ``--replace`` asks for it, and even
then only the build's own file names in it are replaced. Never, flag or not:

- through a symbolic link: the folder itself, or a file or folder the build replaces in it;
- inside another build's folder or a run directory, or into one folder for both models and splits;
- into the repository's ``sample_data/`` (the shipped zoo and worlds), except a full-size build with the
  spec's own seed, into a new folder or into the shipped build of that very spec (``make zoo``).

``--card-only`` writes the card of an earlier build of the same world only, under the same rules.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from opsd_diag.errors import OpsdError
from opsd_diag.io import safe

MARKER = "zoo_build.json"
SHIPPED = Path(__file__).resolve().parents[2] / "sample_data"
SIZES = ("full", "ci")
MODEL_FILES, MODEL_DIRS = ("MODEL_CARD.md", "build_report.json", MARKER), ("base", "teacher", "student")
PROBLEM_FILES = ("test.jsonl", "dev.jsonl", "train.jsonl", "second_skill.jsonl", MARKER)
ROLES = {"models": "models folder", "problems": "problem splits folder"}
ELSEWHERE = "pass --out and --problems-dir folders outside sample_data/ (--problems-dir '' skips the splits)"


def marker(world: str, size: str, seed: int, holds: str) -> bytes:
    """The marker's content: which build wrote the folder."""
    return (json.dumps({"written_by": "opsd-diag zoo build", "world": world, "size": size, "seed": seed,
                        "holds": holds}, indent=2) + "\n").encode()


def read_marker(folder) -> dict | None:
    """The marker of a build folder, or None when it has none this tool could have written."""
    try:
        data = safe.read_json(Path(folder) / MARKER, limit=1 << 16)
    except (OSError, ValueError, OpsdError):  # absent, unreadable, not JSON, a link, a FIFO, too big
        return None
    ok = isinstance(data, dict) and isinstance(data.get("world"), str) and data.get("holds") in ROLES
    return data if ok else None


def write_marker(folder: Path, world: str, size: str, seed: int, holds: str) -> None:
    """Claim ``folder`` for this build (created if absent), before anything else is written into it."""
    if folder.is_symlink():  # checked before the build; again, in case it changed since
        raise OpsdError(f"the problem splits folder {folder} became a symbolic link: nothing was written")
    folder.mkdir(parents=True, exist_ok=True)
    safe.write_file(folder / MARKER, marker(world, size, seed, holds))


# ------------------------------------------------------------------------------------ the checks

def check_size_seed(size: str, seed: int | None) -> None:
    if size not in SIZES:
        raise OpsdError(f"invalid --size '{size}': use one of {', '.join(SIZES)}")
    if seed is not None and not 0 <= seed < 2 ** 32:
        raise OpsdError(f"invalid --seed {seed}: use a whole number from 0 to {2 ** 32 - 1}")


def check_build(world, out: Path, problems: Path | None, size: str, seed: int | None, replace: bool = False) -> None:
    """Every check of a build before its first write (OpsdError): size, seed, memory, both folders."""
    check_size_seed(size, seed)
    seed = world.seed if seed is None else seed
    if size == "full":
        check_memory(world)
    for path, role in ((out, "models"), (problems, "problems")):
        if path is not None:  # a NUL, an over-long name, a loop of links: before any path is resolved
            safe.check_path(path, f"the {ROLES[role]} {path}")
    if problems is not None:
        _check_apart(Path(out), Path(problems))
    _check_folder(Path(out), "models", world, size, seed, replace)
    if problems is not None:
        _check_folder(Path(problems), "problems", world, size, seed, replace)


def check_card(world, out: Path, replace: bool = False) -> None:
    """``--card-only``: ``out`` holds an earlier build of this world (its card is the one file written)."""
    out = Path(out)
    label = f"the models folder {out}"
    safe.check_path(out, label)
    if out.is_symlink():
        raise OpsdError(f"{label} is a symbolic link: a build never writes through one; name the folder itself")
    if not out.is_dir():
        raise OpsdError(f"{label} does not exist or is not a folder: build the world first (opsd-diag zoo build), "
                        "or pass --out the folder of its build")
    _check_owner(out, "models", world, replace, ("MODEL_CARD.md",), (), card=True)


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(world) -> None:
    """A full-size build trains the base/teacher chain and the student side by side: both must fit."""
    need, have = world.train_bytes(), machine_memory()
    if have is not None and need > have:
        t = world.training
        raise OpsdError(
            f"base.shape, student.shape and training.batch of the world '{world.name}': a full-size build trains with "
            f"about {need / 2 ** 30:.1f} GiB (base and teacher {world.base.shape.params(t.vocab_size):,} parameters, "
            f"student {world.student.shape.params(t.vocab_size):,}, batch {t.batch}), more than this machine's "
            f"{have / 2 ** 30:.1f} GiB: choose smaller shapes or a smaller batch (--size ci builds a smoke size)")


def _check_apart(out: Path, problems: Path) -> None:
    a, b = Path(os.path.realpath(out)), Path(os.path.realpath(problems))
    if a == b or a in b.parents or b in a.parents:
        raise OpsdError(f"the models folder {out} and the problem splits folder {problems} overlap (the same folder, "
                        "or one inside the other): give each its own folder")


def _check_folder(path: Path, role: str, world, size: str, seed: int, replace: bool) -> None:
    label = f"the {ROLES[role]} {path}"
    safe.check_path(path, label)
    if path.is_symlink():
        raise OpsdError(f"{label} is a symbolic link: a build never writes through one; name the folder itself, "
                        "or a new one")
    if os.path.lexists(path) and not path.is_dir():
        raise OpsdError(f"{label} is {safe.kind(os.lstat(path).st_mode) or 'a file'}, not a folder: choose a folder")
    host = next((d for d in Path(os.path.abspath(path)).parents if os.path.lexists(d / MARKER)), None)
    if host is not None:
        raise OpsdError(f"{label} lies inside the build folder {host}: a build never writes into another build; "
                        "choose a folder outside it")
    run = safe.run_of(path)
    if run is not None:
        raise OpsdError(f"{label} lies inside the run directory {run}: a build never writes into a run; choose a "
                        "folder outside it")
    if shipped(path) and size != "full":
        raise OpsdError(f"{label} is in the shipped sample_data/ folder, where only full-size builds go: a {size} "
                        f"build would put untrained models and their problems there; {ELSEWHERE}")
    if shipped(path) and seed != world.seed:
        raise OpsdError(f"{label} is in the shipped sample_data/ folder, built with the spec's seed {world.seed}: "
                        f"a build with --seed {seed} goes elsewhere; {ELSEWHERE}")
    try:
        filled = path.is_dir() and any(path.iterdir())
    except OSError as e:
        raise OpsdError(f"cannot read {label} ({e.strerror}): choose a folder you can read and write") from None
    if filled:
        files, dirs = (MODEL_FILES, MODEL_DIRS) if role == "models" else (PROBLEM_FILES, ())
        _check_owner(path, role, world, replace, files, dirs)
    _check_writable(path, role)


def _check_owner(path: Path, role: str, world, replace: bool, files, dirs, card: bool = False) -> None:
    """A non-empty ``path`` is an earlier build of ``world`` (or ``replace``), and what would be replaced
    in it is a plain file or folder."""
    label = f"the {ROLES[role]} {path}"
    mark = read_marker(path)
    ours = mark is not None and mark["world"] == world.name and mark["holds"] == role
    held = ("no build marker (zoo_build.json)" if mark is None else
            f"the {mark['holds']} of a build of the world {mark['world']!r}")
    if shipped(path):
        if not ours:
            raise OpsdError(f"{label} is shipped data holding {held}: a build of the world {world.name!r} never "
                            f"replaces it; {ELSEWHERE}")
        spec = SHIPPED / "worlds" / f"{world.name}.yaml"
        if not world.matches_spec_file(spec):
            raise OpsdError(f"{label} holds the shipped build of {world.name!r}, which only its own spec {spec} "
                            f"rebuilds, and this spec differs from it: {ELSEWHERE}" if not card else
                            f"{label} holds the shipped build of {world.name!r}, whose card only its own spec {spec} "
                            "renders, and this spec differs from it: render it from that spec")
    elif not ours and not replace:
        what = "write its MODEL_CARD.md" if card else f"replace its {', '.join((*files, *dirs))}"
        fix = "pass --out the folder of this world's build" if card else "choose a new folder"
        raise OpsdError(f"{label} holds {held}, not the {role} of an earlier build of the world {world.name!r}: a build "
                        f"replaces only its own earlier build; {fix}, or pass --replace to {what} anyway")
    for name in files:
        with_kind = _kind(path / name)
        if with_kind not in (None, "missing"):
            raise OpsdError(f"{path / name} is {with_kind}: a build never writes through or over it; remove it")
    for name in dirs:
        p = path / name
        if p.is_symlink() or (os.path.lexists(p) and not p.is_dir()):
            raise OpsdError(f"{p} is {'a symbolic link' if p.is_symlink() else 'not a folder'}: a build never writes "
                            "through or over it; remove it")


def _kind(path: Path) -> str | None:
    try:
        return safe.kind(os.lstat(path).st_mode)
    except FileNotFoundError:
        return "missing"


def _check_writable(path: Path, role: str) -> None:
    """Fail before any training when the folder cannot be written."""
    parent = path if path.exists() else path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:
        with tempfile.NamedTemporaryFile(dir=parent):
            pass
    except OSError as e:
        what, option = ("the zoo", "--out") if role == "models" else ("the problem splits", "--problems-dir")
        raise OpsdError(f"cannot write {what} to {path} ({e.strerror}): choose a writable {option} directory") from None


def shipped(path) -> bool:
    """Is ``path`` in the repository's ``sample_data/`` (links resolved)?"""
    root = os.path.realpath(SHIPPED)
    return os.path.isdir(root) and Path(os.path.realpath(path)).is_relative_to(root)
