"""A finished build's report (``build_report.json``), read back and checked before anything uses it.

``zoo build --card-only`` renders the model card from it and ``rebuild_check`` rebuilds with its size and
seed. A report edited by hand, cut short, of another world or not this tool's at all is one OpsdError
naming the key, never a traceback halfway through a card: every number the card prints is checked here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from opsd_diag.errors import OpsdError
from opsd_diag.io import safe

REPORT = "build_report.json"
ROLES = ("base", "teacher", "student")
Share = Annotated[float, Field(ge=0.0, le=1.0)]
Table = dict[str, dict[str, Share]]
AGAIN = "build the world again (opsd-diag zoo build) to rewrite it"


def _short(text: str) -> str:
    """A name read from the file, cut to a length one error line can hold."""
    return text if len(text) <= 60 else text[:60] + "..."


class StoredReport(BaseModel):
    """The fields ``zoo.build.BuildReport`` writes, with their types and ranges."""
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    seed: Annotated[int, Field(ge=0, lt=2 ** 32)]
    size: Literal["full", "ci"]
    params: dict[str, Annotated[int, Field(gt=0)]]
    steps: dict[str, Annotated[int, Field(ge=0)]]
    final_loss: dict[str, float]
    accuracy: Table
    subset_accuracy: Table
    seconds: Annotated[float, Field(ge=0.0)] = 0.0
    style: dict[str, Share] = Field(default_factory=dict)
    second_skill: dict[str, Share] = Field(default_factory=dict)
    probe: Table = Field(default_factory=dict)
    pass_k: Table = Field(default_factory=dict)
    world: str = ""


def read_report(folder, world) -> dict:
    """The checked report of the build in ``folder``, a build of ``world`` (its card's rows and levels)."""
    path = Path(folder) / REPORT
    if path.is_symlink():
        raise OpsdError(f"{path} is a symbolic link: a build's report is read from its own folder only; replace the "
                        "link with the file itself")
    try:
        data = safe.read_json(path, limit=1 << 20)
    except (FileNotFoundError, NotADirectoryError):
        raise OpsdError(f"no build report {path}: build the world first (opsd-diag zoo build)") from None
    except ValueError as e:  # not JSON, not UTF-8
        raise OpsdError(f"{path} is not a JSON build report ({' '.join(str(e).split())[:120]}): {AGAIN}") from None
    except OSError as e:
        raise OpsdError(f"cannot read the build report {path} ({e.strerror})") from None
    if not isinstance(data, dict):
        raise OpsdError(f"{path} holds a JSON {type(data).__name__}, not a build report: {AGAIN}")
    try:
        report = StoredReport.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        key = _short(".".join(str(p) for p in err["loc"]))
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        raise OpsdError(f"{path}: {key}: {msg}: the report is damaged or not this tool's; {AGAIN}") from None
    _fits(report, world, path)
    return report.model_dump()


def _fits(r: StoredReport, world, path: Path) -> None:
    """The report is of this world: its name, the three models, every card row and level."""
    want = "" if world.is_bundled() else world.name
    if r.world != want:
        def name(w: str) -> str:
            return "the bundled zoo" if not w else f"the world {w!r}"
        raise OpsdError(f"{path} is the build report of {name(_short(r.world))}, not of {name(want)}: pass the spec of "
                        "the world built there, or --out the folder of this world's build")
    for key in ("params", "steps", "final_loss"):
        missing = [m for m in ROLES if m not in getattr(r, key)]
        if missing:
            raise OpsdError(f"{path}: {key} lacks {', '.join(missing)}: {AGAIN}")
    cols = [f"level {lv}" for lv in world.task.levels] + ["all"]
    for key in ("accuracy", "subset_accuracy"):
        missing = [row for row in world.card_rows() if row not in getattr(r, key)]
        if missing:
            raise OpsdError(f"{path}: {key} lacks the row(s) {', '.join(missing)} that this spec's card shows: the "
                            "build is of another version of the spec; " + AGAIN)
    for key in ("accuracy", "subset_accuracy", "probe"):
        for row, cells in getattr(r, key).items():
            missing = [c for c in cols if c not in cells]
            if missing:
                raise OpsdError(f"{path}: {key}.{_short(row)} lacks {', '.join(missing)} (the spec's task.levels): the build "
                                "is of another version of the spec; " + AGAIN)
    if len({tuple(cells) for cells in r.pass_k.values()}) > 1:
        raise OpsdError(f"{path}: pass_k: its rows name different k: {AGAIN}")
