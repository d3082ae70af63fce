"""The ledger of a notebook's graded exercises: what the learner predicted, which runs were shown, the
answers the checks judged, the hints asked for and the resets, kept on disk so that a kernel restart
forgets none of it.

One JSON file per notebook, ``<data folder>/exercises/<notebook>.json`` (the data folder is the notebooks'
``rstream-data/``, beside them; a notebook's first cell empties its own ``rstream-data/<notebook>/`` folder
only, never this one). Per exercise it holds a list of events, oldest first, each with its place in the
file's order (``n``: a counter, not a clock, so that no clock change can put a prediction before a run) and
the wall-clock time for a reader. Nothing is ever removed: a reset is an event too, and an exercise's
state is what its events say since its last reset (``Record``). Each write replaces the whole file
atomically (a temporary file, then ``os.replace``), so a kernel killed mid-write leaves the old ledger
or the new one, never half of one.

Values (a prediction, what a run showed) are kept as their ``repr`` and read back with
``ast.literal_eval``: numbers, strings, lists, tuples, dicts and sets come back as they were; numpy
scalars are stored as the Python numbers they hold.
"""

from __future__ import annotations

import ast
import datetime
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The notebooks' data folder, relative to the kernel's working folder (the notebook's own folder in
#: JupyterLab): ``JobProperties``' default ``data_dir``. Read at each use, so a test can point it elsewhere.
DATA_DIR = "rstream-data"
#: The ledgers' folder inside the data folder.
FOLDER = "exercises"
#: The ledger of predictions made with no notebook named (``predict(..., ledger=None)``).
DEFAULT = "default"
FORMAT = 1
ABOUT = ("The graded exercises of one notebook: per exercise, what was predicted, the runs shown, the answers "
         "the checks judged, the hints asked for and the resets (exercises.reset(name)), oldest first.")

PREDICTION, REVEAL, ATTEMPT, HINT, RESET = "prediction", "reveal", "attempt", "hint", "reset"


def plain(value: Any) -> Any:
    """``value`` as plain Python: numpy scalars as the numbers they hold, containers rebuilt of plain values."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return value.item()
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return type(value)(plain(v) for v in value)
    return value


def as_text(value: Any) -> str:
    """How the ledger stores ``value``: the ``repr`` of its plain form."""
    return repr(plain(value))


def as_value(text: str) -> Any:
    """A value the ledger stored (``as_text``), as it was; the text itself when it is no Python literal."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


@dataclass(frozen=True)
class Record:
    """One exercise's state: what its events say since its last reset (values as ``as_text`` stored them)."""

    prediction: str | None = None  # the latest prediction
    predicted_at: int | None = None
    shown: str | None = None  # what the latest run showed
    revealed_at: int | None = None  # the first run shown: a prediction after it does not count
    attempts: tuple[str, ...] = ()  # the keys of the distinct answers the check judged
    hints_asked: int = 0
    resets: int = 0  # over the whole history

    @property
    def late(self) -> bool:
        """Whether the prediction that stands was recorded after the run was shown."""
        return (self.predicted_at is not None and self.revealed_at is not None
                and self.predicted_at > self.revealed_at)


def fold(events: list[dict[str, Any]]) -> Record:
    """The ``Record`` that ``events`` (one exercise's, oldest first) leave."""
    resets = sum(1 for e in events if e.get("event") == RESET)
    since = [i for i, e in enumerate(events) if e.get("event") == RESET]
    current = events[since[-1] + 1:] if since else events
    prediction = predicted_at = shown = revealed_at = None
    attempts: list[str] = []
    hints = 0
    for event in current:
        kind = event.get("event")
        if kind == PREDICTION:
            prediction, predicted_at = event.get("value"), event.get("n")
        elif kind == REVEAL:
            shown = event.get("value")
            if revealed_at is None:
                revealed_at = event.get("n")
        elif kind == ATTEMPT and event.get("key") not in attempts:
            attempts.append(str(event.get("key")))
        elif kind == HINT:
            hints += 1
    return Record(prediction, predicted_at, shown, revealed_at, tuple(attempts), hints, resets)


class Ledger:
    """One notebook's ledger file (see the module's docstring). Every call reads the file afresh, so two
    objects, or two kernels, over one file see the same ledger."""

    def __init__(self, path: str | Path, notebook: str = "") -> None:
        self.path = Path(path)
        self.notebook = notebook or self.path.stem

    @classmethod
    def of(cls, notebook: str, data_dir: str | Path | None = None) -> Ledger:
        """The ledger of ``notebook`` (``"01"``) in ``data_dir`` (default: ``DATA_DIR``, from the working folder)."""
        return cls(Path(data_dir if data_dir is not None else DATA_DIR).absolute() / FOLDER / f"{notebook}.json",
                   notebook)

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    def _read(self) -> dict[str, Any]:
        empty = {"format": FORMAT, "notebook": self.notebook, "about": ABOUT, "exercises": {}}
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return empty
        except (OSError, ValueError):
            # Unreadable (edited by hand, or not ours): kept aside for a reader, and a new ledger begins.
            aside = self.path.with_name(f"{self.path.stem}.unreadable-{_now().replace(':', '')}.json")
            os.replace(self.path, aside)
            return empty
        if not isinstance(doc, dict) or not isinstance(doc.get("exercises"), dict):
            return empty
        return doc

    def _write(self, doc: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with temporary.open("w") as out:
            json.dump(doc, out, indent=1, ensure_ascii=False)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)

    def events(self, exercise: str) -> list[dict[str, Any]]:
        """Every event of ``exercise``, oldest first (resets and what came before them too)."""
        return list(self._read()["exercises"].get(exercise, []))

    def record(self, exercise: str) -> Record:
        """``exercise``'s state since its last reset."""
        return fold(self.events(exercise))

    def add(self, exercise: str, event: str, **fields: Any) -> dict[str, Any]:
        """Append one event to ``exercise`` (its ``n`` next in the file's order) and write the file; the event."""
        doc = self._read()
        last = max((e.get("n", 0) for events in doc["exercises"].values() for e in events), default=0)
        entry = {"n": last + 1, "at": _now(), "event": event, **fields}
        doc["exercises"].setdefault(exercise, []).append(entry)
        self._write(doc)
        return entry


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
