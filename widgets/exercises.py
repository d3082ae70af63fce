"""Exercise checks for the workshop notebooks: each says right, not yet, or what is off, with a hint;
none raises, so a notebook always runs top to bottom, answered or not.

Two families. ``check(exercise, answer, expected, hint)`` compares a value with an expected one that the
check cell computes (a look-up). The graded kinds need the skill: ``predict`` / ``reveal`` /
``check_prediction`` (predict, then run: the prediction must be recorded before the run is shown) and
``check_job`` (debug this, build this: the learner hands over a job, and the check reads what the job
did from the broker and judges it against a reference computed out of the notebook's sight, in
``rstream.widgets.graded``). Their hints come in levels (``Hints``), collapsed."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from html import escape
from typing import Any

RIGHT, NOT_YET, WRONG = "right", "not yet", "not quite"
_COLOURS = {RIGHT: ("#ebfbee", "#2b8a3e"), NOT_YET: ("#fff9db", "#e67700"), WRONG: ("#fff5f5", "#c92a2a")}


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one exercise check: ``verdict`` is ``right``, ``not yet`` or ``not quite``."""

    exercise: str
    verdict: str
    message: str

    @property
    def passed(self) -> bool:
        return self.verdict == RIGHT

    def __str__(self) -> str:
        mark = {RIGHT: "✔", NOT_YET: "…", WRONG: "✘"}[self.verdict]
        return f"{mark} {self.exercise}: {self.verdict}. {self.message}"

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        bg, fg = _COLOURS[self.verdict]
        return (f'<div data-rstream-check="{self.verdict}" style="background:{bg};border-left:4px solid {fg};'
                f'padding:6px 10px;margin:4px 0;overflow-wrap:anywhere"><b style="color:{fg}">'
                f"{escape(self.exercise)}: {escape(self.verdict)}</b> {escape(self.message)}</div>")


def check(exercise: str, answer: Any, expected: Any, hint: str,
          same: Callable[[Any, Any], bool] | None = None) -> CheckResult:
    """Compare a learner's ``answer`` with ``expected``. An unanswered exercise (``None`` or ``...``)
    is "not yet" with the ``hint``; a wrong one says how it differs (for dicts and lists: what is
    missing, extra or different, a few at a time); ``same(answer, expected)`` replaces ``==``."""
    if answer is None or answer is Ellipsis:
        return CheckResult(exercise, NOT_YET, f"Fill in the cell above, run it, then this one. Hint: {hint}")
    try:
        right = same(answer, expected) if same is not None else answer == expected
    except Exception as exc:  # an answer of the wrong kind: say so instead of raising
        return CheckResult(exercise, WRONG, f"Could not compare your answer ({type(exc).__name__}: {exc}). Hint: {hint}")
    if right:
        return CheckResult(exercise, RIGHT, "Well done.")
    return CheckResult(exercise, WRONG, f"{_difference(answer, expected)} Hint: {hint}")


def _difference(answer: Any, expected: Any, shown: int = 3) -> str:
    if isinstance(expected, Mapping) and isinstance(answer, Mapping):
        missing = [k for k in expected if k not in answer]
        extra = [k for k in answer if k not in expected]
        wrong = [k for k in expected if k in answer and answer[k] != expected[k]]
        parts = []
        if missing:
            parts.append(f"{len(missing)} keys missing (e.g. {', '.join(map(repr, missing[:shown]))})")
        if extra:
            parts.append(f"{len(extra)} keys that should not be there (e.g. {', '.join(map(repr, extra[:shown]))})")
        if wrong:
            parts.append("values differ for " + ", ".join(f"{k!r} (yours {answer[k]!r}, expected {expected[k]!r})"
                                                           for k in wrong[:shown]))
        return "Your answer differs: " + "; ".join(parts) + "."
    if isinstance(expected, (list, tuple)) and isinstance(answer, (list, tuple)):
        if len(answer) != len(expected):
            return f"Your answer has {len(answer)} items, {len(expected)} were expected."
        first = next(i for i, (a, e) in enumerate(zip(answer, expected)) if a != e)
        return f"Item {first} differs: yours {answer[first]!r}, expected {expected[first]!r}."
    if type(answer) is not type(expected):
        return f"Your answer is a {type(answer).__name__}; a {type(expected).__name__} was expected."
    return f"Your answer is {answer!r}."


# -- hints in levels ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Hints:
    """Hints in three levels, shown collapsed one inside the other: first a ``nudge`` (where to look),
    then the ``concept`` (the rule that decides), then the ``call`` (the code). A learner opens only
    as many as they need; the text form (a terminal, a test) gives the nudge alone."""

    nudge: str
    concept: str
    call: str

    def __str__(self) -> str:
        return self.nudge

    def html(self) -> str:
        levels = [("a nudge", self.nudge), ("the concept", self.concept), ("the call", self.call)]
        out = ""
        for number, (title, text) in reversed(list(enumerate(levels, 1))):
            out = (f'<details data-rstream-hint="{number}" style="margin:2px 0 0 {0 if number == 1 else 12}px">'
                   f"<summary>Hint {number}: {title}</summary><div>{escape(text)}</div>{out}</details>")
        return out


@dataclass(frozen=True, repr=False)  # repr: the one line of CheckResult, not the fields
class Graded(CheckResult):
    """A check of one of the graded kinds (predict, debug, build): its hints come in levels, collapsed."""

    hints: Hints | None = None

    def __str__(self) -> str:
        mark = {RIGHT: "✔", NOT_YET: "…", WRONG: "✘"}[self.verdict]
        hint = f" Hint: {self.hints.nudge}" if self.hints is not None and not self.passed else ""
        return f"{mark} {self.exercise}: {self.verdict}. {self.message}{hint}"

    def _repr_html_(self) -> str:
        bg, fg = _COLOURS[self.verdict]
        hints = self.hints.html() if self.hints is not None and not self.passed else ""
        return (f'<div data-rstream-check="{self.verdict}" style="background:{bg};border-left:4px solid {fg};'
                f'padding:6px 10px;margin:4px 0;overflow-wrap:anywhere"><b style="color:{fg}">'
                f"{escape(self.exercise)}: {escape(self.verdict)}</b> {escape(self.message)}{hints}</div>")


def _unanswered(answer: Any) -> bool:
    return answer is None or answer is Ellipsis


# -- predict, then run -------------------------------------------------------------------------------

#: The order of predictions and reveals in this kernel: a counter, not a clock, so two calls in one
#: cell still have an order and no clock change can move one before the other.
_ORDER = itertools.count(1)


@dataclass
class _Ledger:
    prediction: Any = None
    predicted_at: int | None = None
    shown: Any = None
    revealed_at: int | None = None  # the first time the run was shown: later predictions are refused


_LEDGERS: dict[str, _Ledger] = {}


def _ledger(exercise: str) -> _Ledger:
    return _LEDGERS.setdefault(exercise, _Ledger())


class Note:
    """What ``predict`` and ``reveal`` display: one line, coloured as a check is, but with no verdict."""

    def __init__(self, text: str, tone: str = NOT_YET) -> None:
        self.text, self.tone = text, tone

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        bg, fg = _COLOURS[self.tone]
        return (f'<div data-rstream-note style="background:{bg};border-left:4px solid {fg};padding:6px 10px;'
                f'margin:4px 0;overflow-wrap:anywhere">{escape(self.text)}</div>')


def predict(exercise: str, prediction: Any, ledger: str | None = None) -> Note:
    """Record a learner's prediction for a "predict, then run" exercise (``None`` or ``...``: none yet).
    Each call records the moment it ran; ``check_prediction`` refuses one recorded after the run was
    revealed, so a prediction cannot be copied from the run. ``ledger`` names the record when the
    exercise's name is not unique in the kernel (default: the name)."""
    if _unanswered(prediction):
        return Note(f"{exercise} · no prediction yet: write it in the cell, then run the cell.")
    record = _ledger(ledger or exercise)
    record.prediction, record.predicted_at = prediction, next(_ORDER)
    late = record.revealed_at is not None
    return Note(f"{exercise} · prediction recorded: {prediction!r}"
                + (" (after the run was shown: it will not count)" if late else ". Now run the next cell."),
                WRONG if late else RIGHT)


def reveal(exercise: str, run: Callable[[], Any], ledger: str | None = None) -> Note:
    """Run what a "predict, then run" exercise asks about (``run()``: start the job, read the broker) and
    show what it returned, but only once a prediction is recorded: the answer stays hidden until then.
    The first reveal's moment is kept; what the run returned is what ``check_prediction`` compares with."""
    record = _ledger(ledger or exercise)
    if record.predicted_at is None:
        return Note(f"{exercise} · the run waits for your prediction: write it in the cell above and run "
                    "that cell first (the answer stays hidden until you have predicted).")
    record.shown = run()
    if record.revealed_at is None:
        record.revealed_at = next(_ORDER)
    return Note(f"{exercise} · the run shows: {record.shown!r}", RIGHT)


def check_prediction(exercise: str, hints: Hints, same: Callable[[Any, Any], bool] | None = None,
                     explain: str = "", ledger: str | None = None) -> Graded:
    """Compare the recorded prediction with what the run showed. "not yet" until both exist; "not quite"
    for a prediction recorded after the reveal, whatever its value; ``explain`` follows a wrong one."""
    record = _ledger(ledger or exercise)
    if record.predicted_at is None:
        return Graded(exercise, NOT_YET, "Write your prediction, run its cell, then the run's cell, then this one.",
                      hints)
    if record.revealed_at is None:
        return Graded(exercise, NOT_YET, "Your prediction is recorded: run the cell that runs the job, then this one.",
                      hints)
    if record.predicted_at > record.revealed_at:
        return Graded(exercise, WRONG, "Your prediction was recorded after the run was shown, so it is not a "
                      "prediction. Restart the kernel, run the notebook up to the exercise, and predict before "
                      "you run.", hints)
    try:
        right = same(record.prediction, record.shown) if same is not None else record.prediction == record.shown
    except Exception as exc:
        return Graded(exercise, WRONG, f"Could not compare your prediction ({type(exc).__name__}: {exc}).", hints)
    if right:
        return Graded(exercise, RIGHT, "Predicted before the run, and the run agrees. Well done.")
    return Graded(exercise, WRONG, f"You predicted {record.prediction!r}; the run showed {record.shown!r}. "
                  f"{explain} Work out where your reasoning and the run part (predicting again now does not "
                  "count).", hints)


# -- checks of a job: the process and the value ------------------------------------------------------

def _jsons(broker: Any, topic: str) -> list[Any]:
    import json

    return [json.loads(m.body) for m in broker.read(topic)]


@dataclass(frozen=True)
class JobFacts:
    """What a check found on the broker about a learner's job (the process, not an answer typed in):
    that it ran, what it read, its sink and late-data topics as the broker holds them, and the keys its
    state still holds (``job.state()``, read back from its state topics)."""

    job_id: str
    broker: Any
    batches: int
    sources: tuple[str, ...]
    records_left: int
    sinks: dict[str, list[Any]]
    late: list[dict[str, Any]]
    settings: dict[str, Any]
    state_keys: tuple[str, ...] = ()

    @classmethod
    def of(cls, job: Any) -> JobFacts:
        """Read the facts of ``job`` (a ``RocketMQStream``) from the job object and its broker."""
        topology, broker = job.topology, job.broker
        lag = job.lag()
        late = job.late_records()
        props = job.properties
        settings = ({f.name: getattr(props, f.name) for f in dataclasses.fields(props)}
                    if dataclasses.is_dataclass(props) else dict(vars(props)))
        state = job.state() if hasattr(job, "state") else None
        return cls(job_id=job.job_id, broker=broker, batches=len(job.history()), sources=tuple(topology.source_topics),
                   records_left=int(lag["lag"].sum()) if len(lag) else 0,
                   sinks={t: _jsons(broker, t) for t in topology.sink_topics},
                   late=[] if late is None or not len(late) else late.to_dict("records"), settings=settings,
                   state_keys=() if state is None or not len(state) else tuple(sorted(map(str, state["key"]))))


def _is_job(answer: Any) -> bool:
    return all(hasattr(answer, name) for name in ("topology", "broker", "history", "lag", "late_records"))


def check_job(exercise: str, job: Any, hints: Hints, reads: str,
              judge: Callable[[JobFacts], str | None], refuse: Callable[[Any], str | None] | None = None) -> Graded:
    """Check a learner's job by what it did: it is a job (a number or a dict typed in is refused), it read
    ``reads`` to the end in committed batches, and ``judge(facts)`` (the exercise's reference, computed
    from the broker's records, out of the notebook's sight) finds nothing wrong: it returns ``None``, or
    what is off. ``refuse(job)`` names a job that must not count (the broken one given, for instance)."""
    if _unanswered(job):
        return Graded(exercise, NOT_YET, "Put your job in the cell above, run it, then this one.", hints)
    if not _is_job(job):
        return Graded(exercise, WRONG, f"A job (a RocketMQStream that ran) is expected; your answer is of type "
                      f"{type(job).__name__}. The check reads what the job wrote to the broker, so a result "
                      "typed in or computed without the job does not count.", hints)
    if refuse is not None:
        why = refuse(job)
        if why:
            return Graded(exercise, WRONG, why, hints)
    if not job.history():
        return Graded(exercise, WRONG, f"Job {job.job_id!r} has not run yet (no committed batch): call "
                      "run_until_idle() on it.", hints)
    try:
        facts = JobFacts.of(job)
    except Exception as exc:
        return Graded(exercise, WRONG, f"Could not read the job's topics ({type(exc).__name__}: {exc}).", hints)
    if reads not in facts.sources:
        return Graded(exercise, WRONG, f"The job reads {list(facts.sources)}; it should read {reads!r}.", hints)
    if facts.records_left:
        return Graded(exercise, WRONG, f"Job {facts.job_id!r} has {facts.records_left} records left to read: "
                      "run_until_idle() until it has read everything.", hints)
    try:
        wrong = judge(facts)
    except Exception as exc:
        return Graded(exercise, WRONG, f"Could not check the job's output ({type(exc).__name__}: {exc}).", hints)
    if wrong:
        return Graded(exercise, WRONG, wrong, hints)
    return Graded(exercise, RIGHT, f"Job {facts.job_id!r} ran, and what it wrote to the broker is right. Well done.")


class RunFacts:
    """What a workshop notebook's last check found about its own run: facts that must hold (booleans)
    and numbers. Shown as one self-check line; its text form is the facts as JSON, which the tests read."""

    def __init__(self, facts: Mapping[str, Any]) -> None:
        self.facts = dict(facts)

    @property
    def failed(self) -> list[str]:
        return [name for name, value in self.facts.items() if value is False]

    def __repr__(self) -> str:
        import json

        return json.dumps(self.facts)

    def _repr_html_(self) -> str:
        checks = [v for v in self.facts.values() if isinstance(v, bool)]
        if self.failed:
            colour, text = "#c92a2a", (f"self-check: {len(self.failed)} of {len(checks)} checks of this run failed: "
                                       f"{', '.join(self.failed)}")
        else:
            colour, text = "#2b8a3e", (f"self-check: all {len(checks)} checks of this run hold (results equal to "
                                       "their plain-Python references)")
        return f'<div style="color:{colour};font-family:monospace;overflow-wrap:anywhere">{escape(text)}</div>'


def run_facts(facts: Mapping[str, Any]) -> RunFacts:
    """Show a notebook run's self-check (see ``RunFacts``)."""
    return RunFacts(facts)
