"""Exercise checks for the workshop notebooks: each says right, not yet, or what is off, with a hint;
none raises, so a notebook always runs top to bottom, answered or not.

Two families. ``check(exercise, answer, expected, hint)`` compares a value with an expected one that the
check cell computes (a look-up). The graded kinds need the skill: ``predict`` / ``reveal`` /
``check_prediction`` (predict, then run: the prediction must be recorded before the run is shown) and
``check_job`` (debug this, build this: the learner hands over a job, and the check reads what the job
did from the broker and judges it against a reference computed out of the notebook's sight, in
``rstream.widgets.graded``).

The graded kinds keep a notebook's ledger on disk (``rstream.widgets.ledger``): predictions, the runs
shown, the answers judged, the hints asked for and the resets, so that a kernel restart forgets nothing
and a prediction stays refused once its run was shown. Their hints come in three levels (``Hints``) and
open one at a time, each once earned (``open_hints``): a recorded prediction, an answer the check judged,
or ``ask_hint`` after one. An unanswered check shows none, and a check's output never holds the text
of a level still locked."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from html import escape
from typing import Any

from .ledger import ATTEMPT, DEFAULT, HINT, PREDICTION, RESET, REVEAL, Ledger, Record, as_text, as_value

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


# -- hints in levels, opened one at a time ------------------------------------------------------------

#: The levels' titles, in the order they open.
LEVELS = ("a nudge", "the concept", "the call")
#: ``exercises.hint("...")`` in an escaped next step: shown as code.
_HINT_CALL = re.compile(r"exercises\.hint\(&quot;.*?&quot;\)")


@dataclass(frozen=True, repr=False)  # repr: a learner who prints an exercise must not read its hints
class Hints:
    """An exercise's hints in three levels: first a ``nudge`` (where to look), then the ``concept`` (the rule
    that decides), then the ``call`` (the code). They open one at a time, once earned (``open_hints``);
    a check's output holds only the levels opened (``OpenHints``), never the text of a locked one."""

    nudge: str
    concept: str
    call: str

    def __repr__(self) -> str:
        return f"Hints({len(LEVELS)} levels: {', '.join(LEVELS)}; each opens once earned)"

    __str__ = __repr__

    def opened(self, count: int, next_step: str = "", exercise: str = "") -> OpenHints:
        """The first ``count`` levels, and how the next one opens (``next_step``)."""
        texts = (self.nudge, self.concept, self.call)
        return OpenHints(tuple(zip(LEVELS, texts))[:max(0, count)], next_step, exercise)


@dataclass(frozen=True)
class OpenHints:
    """The hint levels a learner has opened, each ``(title, text)``, and ``next_step``: how the next one
    opens. A level still locked is not in it at all, so no rendering of it can show one."""

    shown: tuple[tuple[str, str], ...] = ()
    next_step: str = ""
    exercise: str = ""  # set when shown on its own (``Exercises.hint``)

    def __str__(self) -> str:
        levels = [f"Hint {n} ({title}): {text}" for n, (title, text) in enumerate(self.shown, 1)]
        return " ".join(levels + ([self.next_step] if self.next_step else []))

    def __repr__(self) -> str:
        return f"{self.exercise} · {self}" if self.exercise else str(self)

    def html(self) -> str:
        """Each open level collapsed but the newest, then the next step (muted)."""
        out = ""
        for number, (title, text) in enumerate(self.shown, 1):
            state = " open" if number == len(self.shown) else ""
            out += (f'<details data-rstream-hint="{number}"{state} style="margin:4px 0 0 0">'
                    f"<summary>Hint {number}: {escape(title)}</summary><div>{escape(text)}</div></details>")
        if self.next_step:
            step = _HINT_CALL.sub(lambda call: f"<code>{call.group(0)}</code>", escape(self.next_step))
            out += f'<div data-rstream-hint-next style="color:#666;margin-top:4px">{step}</div>'
        return out

    def _repr_html_(self) -> str:
        bg, fg = _COLOURS[NOT_YET]
        return (f'<div data-rstream-hints style="background:{bg};border-left:4px solid {fg};padding:6px 10px;'
                f'margin:4px 0;overflow-wrap:anywhere"><b style="color:{fg}">{escape(self.exercise)} · hints</b>'
                f"{self.html()}</div>")


@dataclass(frozen=True, repr=False)  # repr: the one line of CheckResult, not the fields
class Graded(CheckResult):
    """A check of one of the graded kinds (predict, debug, build), with the hint levels the learner has
    opened. Made with an exercise's ``Hints``, it opens none: ``open_hints`` decides, from the ledger."""

    hints: Hints | OpenHints | None = None

    def __post_init__(self) -> None:
        if isinstance(self.hints, Hints):
            object.__setattr__(self, "hints", OpenHints(next_step=FIRST_STEP))

    def _open(self) -> OpenHints | None:
        return self.hints if isinstance(self.hints, OpenHints) and not self.passed else None

    def __str__(self) -> str:
        mark = {RIGHT: "✔", NOT_YET: "…", WRONG: "✘"}[self.verdict]
        hints = self._open()
        return f"{mark} {self.exercise}: {self.verdict}. {self.message}" + (f" {hints}" if hints else "")

    def _repr_html_(self) -> str:
        bg, fg = _COLOURS[self.verdict]
        hints = self._open()
        return (f'<div data-rstream-check="{self.verdict}" style="background:{bg};border-left:4px solid {fg};'
                f'padding:6px 10px;margin:4px 0;overflow-wrap:anywhere"><b style="color:{fg}">'
                f"{escape(self.exercise)}: {escape(self.verdict)}</b> {escape(self.message)}"
                f"{hints.html() if hints else ''}</div>")


#: What an exercise's output says of its hints before any is earned.
FIRST_STEP = "Its hints open one at a time, each once the check has judged an answer of yours."
FIRST_STEP_PREDICT = "Its first hint opens once your prediction is recorded, the next once the run is shown."


def _hint_call(exercise: str) -> str:
    return f'exercises.hint("{exercise}")'


def _earned(record: Record, predicts: bool) -> int:
    """The levels a learner's own work has opened: one per distinct answer the check judged, and for a
    "predict, then run" exercise one for the recorded prediction."""
    return len(record.attempts) + (1 if predicts and record.predicted_at is not None else 0)


def _next_step(exercise: str, record: Record, predicts: bool, opened: int) -> str:
    if opened >= len(LEVELS):
        return ""
    if opened == 0:
        return FIRST_STEP_PREDICT if predicts else FIRST_STEP
    if predicts and record.revealed_at is None:
        return (f"Hint {opened + 1} of {len(LEVELS)} opens once the run is shown (before, it would give the "
                "prediction away).")
    if predicts:
        return f"Hint {opened + 1} of {len(LEVELS)}: {_hint_call(exercise)} opens it."
    return (f"Hint {opened + 1} of {len(LEVELS)} opens with your next attempt, or now with "
            f"{_hint_call(exercise)}.")


def _opened(record: Record, predicts: bool) -> int:
    return min(len(LEVELS), _earned(record, predicts) + record.hints_asked)


def _attempt_key(result: CheckResult, answer: Any, record: Record, predicts: bool) -> tuple[str, str]:
    """What makes a judged answer a new attempt (a key) and how the ledger names it. The same answer checked
    again is no new attempt, nor is a second value typed in instead of a job: hints open for work."""
    import hashlib

    if predicts:
        what = f"the prediction {record.prediction} (the run showed {record.shown})"
        basis = f"predict|{record.prediction}|{record.shown}|{result.verdict}"
    elif getattr(answer, "job_id", None) is not None:
        what = f"job {answer.job_id!r}"
        basis = f"job|{answer.job_id}|{result.verdict}|{result.message}"
    else:
        what = f"a {type(answer).__name__}, not a job"
        basis = "no job"
    return hashlib.sha1(basis.encode()).hexdigest()[:12], what


def open_hints(ledger: Ledger, exercise: str, hints: Hints, result: Graded, answer: Any = None,
               predicts: bool = False) -> Graded:
    """``result`` (a check's verdict) with the hint levels the learner has earned. A judged answer (not
    "not yet") that is new is recorded in ``ledger`` as an attempt first: each opens one more level, as
    does a recorded prediction of a "predict, then run" exercise (``predicts``) and each
    ``ask_hint``. A right answer shows none."""
    record = ledger.record(exercise)
    if result.verdict != NOT_YET:
        key, what = _attempt_key(result, answer, record, predicts)
        if key not in record.attempts:
            ledger.add(exercise, ATTEMPT, key=key, verdict=result.verdict, answer=what, message=result.message)
            record = ledger.record(exercise)
    opened = _opened(record, predicts)
    return dataclasses.replace(result, hints=hints.opened(opened, _next_step(exercise, record, predicts, opened)))


def ask_hint(ledger: Ledger, exercise: str, hints: Hints, predicts: bool = False) -> OpenHints | Note:
    """Open one more hint level of ``exercise`` without another attempt, once a first is judged (for a
    "predict, then run" exercise: once the prediction is recorded, and beyond the first level once the
    run is shown); recorded in ``ledger``. Shows every level opened so far."""
    record = ledger.record(exercise)
    opened = _opened(record, predicts)
    if _earned(record, predicts) == 0:
        first = "record your prediction" if predicts else "hand over an answer and run its check"
        return Note(f"{exercise} · no hint yet: {first} first; the hints open after that, one at a time.")
    if predicts and record.revealed_at is None and opened >= 1:
        return Note(f"{exercise} · the next hint opens once the run is shown: before, it would give the "
                    "prediction away. Hint 1 is in the check's output.")
    if opened < len(LEVELS):
        ledger.add(exercise, HINT, level=opened + 1)
        record = ledger.record(exercise)
        opened = _opened(record, predicts)
    return hints.opened(opened, _next_step(exercise, record, predicts, opened), exercise)


def reset(ledger: Ledger, exercise: str) -> Note:
    """Start ``exercise`` over: its prediction, run, attempts and hints no longer count. Recorded in
    ``ledger`` as a reset (what came before stays there, for a teacher to read)."""
    ledger.add(exercise, RESET)
    return Note(f"{exercise} · started over: the ledger ({ledger.path}) keeps what came before, marked as "
                "reset. A prediction counts again if you record it before the run is shown.", NOT_YET)


def _unanswered(answer: Any) -> bool:
    return answer is None or answer is Ellipsis


# -- predict, then run -------------------------------------------------------------------------------


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


def _ledger_of(ledger: Ledger | str | None) -> Ledger:
    """A ``Ledger``; a name: that ledger in the default data folder; None: the default one."""
    return ledger if isinstance(ledger, Ledger) else Ledger.of(ledger or DEFAULT)


def predict(exercise: str, prediction: Any, ledger: Ledger | str | None = None) -> Note:
    """Record a learner's prediction for a "predict, then run" exercise (``None`` or ``...``: none yet) in
    ``ledger`` (a notebook's, on disk: ``Ledger``). The ledger keeps the order of predictions and runs
    across kernel restarts, and ``check_prediction`` refuses a prediction recorded after the run was
    shown. Running the cell again with the prediction that stands records nothing new (a Run All of a
    notebook already done keeps its prediction's place)."""
    book = _ledger_of(ledger)
    record = book.record(exercise)
    if _unanswered(prediction):
        if record.prediction is not None:
            return Note(f"{exercise} · nothing in this cell; your prediction recorded before, {record.prediction}, "
                        "stands.", WRONG if record.late else RIGHT)
        return Note(f"{exercise} · no prediction yet: write it in the cell, then run the cell.")
    text = as_text(prediction)
    if text != record.prediction:
        book.add(exercise, PREDICTION, value=text)
        record = book.record(exercise)
    if record.late:
        return Note(f"{exercise} · prediction recorded: {text}, after the run was shown: it does not count. A "
                    "prediction counts only when it is recorded before the run is shown.", WRONG)
    return Note(f"{exercise} · prediction recorded: {text}"
                + (". Now run the next cell." if record.revealed_at is None else ", before the run was shown."), RIGHT)


def reveal(exercise: str, run: Callable[[], Any], ledger: Ledger | str | None = None) -> Note:
    """Run what a "predict, then run" exercise asks about (``run()``: start the job, read the broker) and
    show what it returned, but only once a prediction is recorded: the answer stays hidden until then.
    The ledger keeps the first run's place in its order, and what the latest run showed (what
    ``check_prediction`` compares with)."""
    book = _ledger_of(ledger)
    record = book.record(exercise)
    if record.predicted_at is None:
        return Note(f"{exercise} · the run waits for your prediction: write it in the cell above and run "
                    "that cell first (the answer stays hidden until you have predicted).")
    text = as_text(run())
    if record.revealed_at is None or text != record.shown:
        book.add(exercise, REVEAL, value=text)
    return Note(f"{exercise} · the run shows: {text}", RIGHT)


def check_prediction(exercise: str, hints: Hints, same: Callable[[Any, Any], bool] | None = None,
                     explain: str = "", ledger: Ledger | str | None = None) -> Graded:
    """Compare the prediction that stands in ``ledger`` with what the run showed. "not yet" until both
    exist; "not quite" for a prediction recorded after the run was shown, whatever its value; ``explain``
    follows a wrong one. Its hints stay closed: ``open_hints`` opens those earned."""
    record = _ledger_of(ledger).record(exercise)
    if record.predicted_at is None or record.prediction is None:
        return Graded(exercise, NOT_YET, "Write your prediction, run its cell, then the run's cell, then this one.",
                      hints)
    if record.revealed_at is None or record.shown is None:
        return Graded(exercise, NOT_YET, "Your prediction is recorded: run the cell that runs the job, then this one.",
                      hints)
    if record.late:
        return Graded(exercise, WRONG, f"Your prediction {record.prediction} was recorded after the run was shown, "
                      "so it is not a prediction: once the run is shown, no prediction counts.", hints)
    predicted, shown = as_value(record.prediction), as_value(record.shown)
    try:
        right = same(predicted, shown) if same is not None else predicted == shown
    except Exception as exc:
        return Graded(exercise, WRONG, f"Could not compare your prediction ({type(exc).__name__}: {exc}).", hints)
    if right:
        again = " (after starting over with a reset)" if record.resets else ""
        return Graded(exercise, RIGHT, f"Predicted before the run{again}, and the run agrees. Well done.")
    return Graded(exercise, WRONG, f"You predicted {record.prediction}; the run showed {record.shown}. "
                  f"{explain} Work out where your reasoning and the run part (a prediction made now does not "
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
    what is off. ``refuse(job)`` names a job that must not count (the broken one given, for instance).
    Its hints stay closed: ``open_hints`` opens those earned."""
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
