"""The graded exercises of notebooks 00 to 07, kept in the package so that no check cell shows (or
computes, in plain sight) what the answer is. Each exercise is one of three kinds:

* **predict, then run**: the learner records a prediction, a cell runs a job and shows what happened,
  the check compares the two and refuses a prediction recorded after the run was shown;
* **debug this**: a broken job with two causes planted is given; the learner hands over the fixed job, which
  the check judges by what it wrote to the broker, saying how many causes are fixed and what the others
  still do to the output (``Cause``), never how to fix them;
* **build**: the learner builds and runs a job; judged the same way.

References are computed here from the broker's records (the topic the job read), by RIP-58's rule. In a
notebook::

    from rstream.widgets.graded import exercises_of
    exercises = exercises_of("02")
    exercises.predict("Exercise 1", my_prediction)   # predict
    exercises.reveal("Exercise 1", run)               # the run, once a prediction exists
    exercises.check("Exercise 1")                     # the prediction against the run
    exercises.check("Exercise 2", fixed_job)          # a job, judged by what it wrote
    exercises.hint("Exercise 2")                      # one more hint level, after a first attempt
    exercises.reset("Exercise 1")                     # start an exercise over (recorded as a reset)

Every prediction, run shown, judged answer, hint and reset goes to the notebook's ledger on disk
(``rstream-data/exercises/<notebook>.json``, ``rstream.widgets.ledger``), so a kernel restart keeps them.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .exercises import (
    Graded,
    Hints,
    JobFacts,
    Note,
    OpenHints,
    _difference,
    ask_hint,
    check_job,
    check_prediction,
    open_hints,
    predict,
    reset,
    reveal,
)
from .ledger import Ledger

# -- references: RIP-58's rule over the broker's records ----------------------------------------------


def records_by_queue(broker: Any, topic: str) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """Per queue of ``topic``, its JSON records in offset order (the order a job reads them)."""
    for queue in range(len(broker.end_offsets(topic))):
        yield queue, [json.loads(m.body) for m in broker.read(topic, queue)]


def split_by_rule(broker: Any, topic: str, time: Callable[[dict[str, Any]], int],
                  lateness: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The records of ``topic`` on time and late by RIP-58's rule, per source queue in offset order:
    ``watermark = max(watermark, data time - lateness)``, late when the data time is below it."""
    on_time: list[dict[str, Any]] = []
    late: list[dict[str, Any]] = []
    for _queue, records in records_by_queue(broker, topic):
        watermark = None
        for record in records:
            ts = time(record)
            watermark = ts - lateness if watermark is None else max(watermark, ts - lateness)
            (late if ts < watermark else on_time).append(record)
    return on_time, late


def tumbling(records: list[dict[str, Any]], time: Callable[[dict[str, Any]], int], key: Callable[[Any], Any],
             size: int, value: Callable[[Any], Any] = lambda r: 1,
             fold: Callable[[Any, Any], Any] = lambda a, b: a + b) -> dict[tuple[Any, int, int], Any]:
    """``{(key, start, end): folded value}`` over tumbling windows of ``size`` ms."""
    out: dict[tuple[Any, int, int], Any] = {}
    for record in records:
        start = time(record) // size * size
        window = (key(record), start, start + size)
        out[window] = value(record) if window not in out else fold(out[window], value(record))
    return out


def window_results(facts: JobFacts) -> dict[tuple[Any, ...], Any]:
    """Every window result a job wrote (``JsonSerializer(with_key=True)`` of a ``WindowKey``), over all
    its sink topics: ``{(key, start, end): value}``."""
    out = {}
    for records in facts.sinks.values():
        for doc in records:
            if isinstance(doc, dict) and isinstance(doc.get("key"), list):
                out[tuple(doc["key"])] = doc["value"]
    return out


def _same_windows(facts: JobFacts, expected: dict[tuple[Any, ...], Any], what: str) -> str | None:
    got = window_results(facts)
    if not got:
        return (f"The job's sink topics {list(facts.sinks)} hold no window result: sink the windows with "
                "JsonSerializer(with_key=True).")
    if got == expected:
        return None
    if all(isinstance(k[1], int) and k[1] > 10 ** 12 for k in got):
        return (f"The windows start at {min(k[1] for k in got)} ms, in this year's wall-clock time: they are "
                f"windows of when the broker stored the records, not of their event time. {what}")
    return f"{_difference(got, expected)} {what}"


# -- the exercises -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exercise:
    """One graded exercise: its kind (``predict``, ``debug`` or ``build``), hints, and how it is judged."""

    kind: str
    hints: Hints
    reads: str = ""
    judge: Callable[[JobFacts], str | None] | None = None
    refuse: Callable[[Any], str | None] | None = None
    explain: str = ""
    same: Callable[[Any, Any], bool] | None = None


@dataclass
class Exercises:
    """The graded exercises of one notebook (``exercises_of("02")``), with its ledger on disk: the
    notebook's predictions, runs shown, judged answers, hints and resets, in
    ``<data_dir>/exercises/<notebook>.json`` (``rstream.widgets.ledger``; ``data_dir`` None: the
    notebooks' ``rstream-data``, from the kernel's working folder)."""

    notebook: str
    items: dict[str, Exercise] = field(default_factory=dict)
    data_dir: str | None = None

    @property
    def ledger(self) -> Ledger:
        return Ledger.of(self.notebook, self.data_dir)

    def predict(self, exercise: str, prediction: Any) -> Note:
        return predict(exercise, prediction, ledger=self.ledger)

    def reveal(self, exercise: str, run: Callable[[], Any]) -> Note:
        return reveal(exercise, run, ledger=self.ledger)

    def check(self, exercise: str, answer: Any = None) -> Graded:
        """Judge ``exercise`` (``answer``: the job handed over; none for a prediction), with the hint levels
        earned so far: each answer the check judges (and, for a prediction, recording it) opens one more."""
        spec = self.items[exercise]
        return open_hints(self.ledger, exercise, spec.hints, self.judge(exercise, answer), answer,
                          predicts=spec.kind == "predict")

    def judge(self, exercise: str, answer: Any = None) -> Graded:
        """The verdict on ``exercise`` alone, its hints closed (``check`` opens those earned)."""
        spec = self.items[exercise]
        if spec.kind == "predict":
            return check_prediction(exercise, spec.hints, same=spec.same, explain=spec.explain, ledger=self.ledger)
        assert spec.judge is not None
        return check_job(exercise, answer, spec.hints, reads=spec.reads, judge=spec.judge, refuse=spec.refuse)

    def hint(self, exercise: str) -> OpenHints | Note:
        """Open the next hint level of ``exercise`` without another attempt (after a first one), and show
        every level opened. Recorded in the ledger."""
        spec = self.items[exercise]
        return ask_hint(self.ledger, exercise, spec.hints, predicts=spec.kind == "predict")

    def reset(self, exercise: str) -> Note:
        """Start ``exercise`` over (its prediction, run, attempts and hints), recorded in the ledger as a reset."""
        self.items[exercise]  # an exercise of this notebook, or KeyError
        return reset(self.ledger, exercise)


def _ts(record: dict[str, Any]) -> int:
    return int(record["ts"])


# notebook 02 ------------------------------------------------------------------------------------------

#: Exercise 2's planted causes: windows of 10 ms (an int is milliseconds), and a sink without the key.
EX02_CAUSES = ["window", "key"]


def _page_windows(facts: JobFacts, causes: frozenset[str]) -> Any:
    """What Exercise 2's job writes with ``causes`` left in: its windows (``{(page, start, end): views}``),
    or, with the key left out, only their counts (sorted)."""
    on_time, _ = _on_time_of(facts, "views", 2_000)
    windows = tumbling(on_time, _ts, lambda r: r["page"], 10 if "window" in causes else 10_000)
    return sorted(windows.values()) if "key" in causes else windows


def _page_output(facts: JobFacts) -> Any:
    """What Exercise 2's job wrote: its windows, or (a sink without the key) its counts, sorted."""
    docs = [doc for records in facts.sinks.values() for doc in records]
    if docs and all(isinstance(d, dict) and isinstance(d.get("key"), list) for d in docs):
        return window_results(facts)
    if docs and all(isinstance(d, int) and not isinstance(d, bool) for d in docs):
        return sorted(docs)
    return None


def _fixed_page_counts(facts: JobFacts) -> str | None:
    def shows(name: str) -> Callable[[JobFacts], bool]:
        return _showing(_page_windows, _page_output, EX02_CAUSES, name)

    return _causes_left(facts, [
        Cause("its windows hold a view or two each, never ten seconds of a page's views;", shows("window")),
        Cause("each of its messages holds a count, but not which page and which window it counts.", shows("key")),
    ], lambda f: _same_windows(f, _page_windows(f, frozenset()),
                               "Each window should hold the on-time views of its page whose ts is in it."))


def _user_windows(facts: JobFacts) -> str | None:
    on_time, _ = _on_time_of(facts, "views", 2_000)
    return _same_windows(facts, tumbling(on_time, _ts, lambda r: r["user"], 20_000),
                         "Count every on-time view of a user in the 20 s window that holds its ts.")


def _on_time_of(facts: JobFacts, topic: str, lateness: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``split_by_rule`` for a job that must run with ``lateness``: raises ``_Off`` when it does not."""
    lateness_set = facts.settings.get("allowed_lateness_ms")
    if lateness_set != lateness:
        raise _Off(f"The job runs with allowed_lateness_ms={lateness_set!r}; the exercise asks for {lateness}.")
    return split_by_rule(facts.broker, topic, _ts, lateness)


class _Off(Exception):
    """A judge's finding, raised from deep in a reference: the job is off in the way the message says."""


def _judging(judge: Callable[[JobFacts], str | None]) -> Callable[[JobFacts], str | None]:
    def run(facts: JobFacts) -> str | None:
        try:
            return judge(facts)
        except _Off as off:
            return str(off)
    return run


def _not_the_given(broken: str) -> Callable[[Any], str | None]:
    """A ``refuse`` for a debug exercise: the broken job given (by its id) is not a fix."""
    def refuse(job: Any) -> str | None:
        if job.job_id == broken:
            return ("That is the broken job itself (or a job with its id, which resumes where it stopped): "
                    "build the fixed one with a new id, and run it.")
        return None
    return refuse


# debug exercises: a job with several causes planted, each found by what it does to the output -----------


@dataclass(frozen=True)
class Cause:
    """One of the causes planted in a debug exercise's broken job. ``shows(facts)``: whether what the job
    wrote still shows it; ``symptom``: what it does to that output, as a learner sees it (never the fix)."""

    symptom: str
    shows: Callable[[JobFacts], bool]


def _causes_left(facts: JobFacts, causes: list[Cause], compare: Callable[[JobFacts], str | None]) -> str | None:
    """A debug exercise's verdict: None when ``compare`` (the job's output against the reference) finds
    nothing off; else which of the planted causes still show, by their symptoms (how many are fixed, never
    how to fix the others), or, when none shows, what ``compare`` found."""
    showing = [c for c in causes if c.shows(facts)]
    if not showing:
        return compare(facts)
    fixed = len(causes) - len(showing)
    found = "none of them is fixed yet" if not fixed else f"{fixed} fixed, {len(showing)} to go"
    listed = "; ".join(f"({i}) {c.symptom.rstrip(';.')}" for i, c in enumerate(showing, 1))
    return f"The broken job has {len(causes)} causes; {found}. What the job wrote still shows: {listed}."


def _combination(expected: Callable[[frozenset[str]], Any], got: Any, names: list[str]) -> frozenset[str] | None:
    """Which planted causes (by name) the output ``got`` still has: the smallest combination whose
    ``expected(combination)`` equals it (the right output is the empty one); None when none does."""
    for size in range(len(names) + 1):
        for combo in itertools.combinations(names, size):
            try:
                if expected(frozenset(combo)) == got:
                    return frozenset(combo)
            except _Off:
                continue
    return None


def _showing(expected: Callable[[JobFacts, frozenset[str]], Any], got: Callable[[JobFacts], Any],
             names: list[str], name: str) -> Callable[[JobFacts], bool]:
    """A ``Cause.shows`` for cause ``name``: the job's output (``got(facts)``) is that of a combination of
    the planted causes (``expected``, given the facts) that holds ``name``."""
    def shows(facts: JobFacts) -> bool:
        try:
            found = _combination(lambda combo: expected(facts, combo), got(facts), names)
        except _Off:
            return False
        return found is not None and name in found
    return shows


EX02_BROKEN = "page-views-broken"

_EX02 = Exercises("02", items={
    "Exercise 1": Exercise("predict", Hints(
        nudge="Work out each queue's watermark first, then the window operator's.",
        concept="Per source queue, watermark = max(watermark, ts - allowed lateness). The window operator's "
                "watermark is the minimum over the queues that feed it, and a window [start, end) fires once "
                "that minimum reaches end.",
        call="queue 0: last ts 31 000 - 2 000; queue 1: last ts 13 000 - 2 000; take the smaller one, then list "
             "the windows whose end is at or below it, as (start, end) tuples."),
        explain="The slower queue's watermark is the one that counts: a window waits for every source queue.",
        same=lambda predicted, shown: (isinstance(predicted, dict) and predicted.get("watermark") == shown["watermark"]
                                       and sorted(tuple(w) for w in predicted.get("fired", ())) == shown["fired"])),
    "Exercise 2": Exercise("debug", Hints(
        nudge="Two causes. Read one message of the broken job's sink as the next application would: what "
              "does it tell? And how much event time does one of its windows span?",
        concept="A window's result is keyed by [page, start, end], and a sink writes that key only when its "
                "serializer is asked to (with_key=True). Window sizes are milliseconds: a bare number is ms, "
                "Time.seconds(10) is 10 000.",
        call=".window(TumblingWindow(Time.seconds(10))) and .sink(..., JsonSerializer(with_key=True)); a new "
             'job id ("page-views-fixed"), run_until_idle().'),
        reads="views", judge=_judging(_fixed_page_counts),
        refuse=_not_the_given(EX02_BROKEN)),
    "Exercise 3": Exercise("build", Hints(
        nudge="It is the job at the top of the notebook with two things changed.",
        concept="A tumbling window count per key: the key decides who is counted together (here the user), "
                "the window size how long (here 20 s); event time comes from select_timestamp.",
        call='key_by(lambda e: e["user"]), .window(TumblingWindow(Time.seconds(20))), .count(), sink to a new '
             'topic with JsonSerializer(with_key=True); RocketMQStream(..., properties={"data_dir": str(DATA), '
             '"allowed_lateness_ms": LATENESS}).run_until_idle()'),
        reads="views", judge=_judging(_user_windows)),
})


# notebook 03 ------------------------------------------------------------------------------------------

#: Exercise 3's choices, and the most late views the chosen lateness may leave.
EX03_CHOICES, EX03_MOST_LATE = (0, 500, 1_500, 2_000, 4_000, 8_000, 16_000), 5
EX03_BROKEN = "slowest-broken"


def _slowest_by(facts: JobFacts, field: str, lateness: int) -> tuple[dict[tuple[Any, ...], Any], int]:
    """Exercise 2's job with its data time read from ``field`` and ``lateness`` allowed: its windows (the
    longest delay, arrival - ts, per server and 5 s) and how many views it finds late."""
    def time(record: dict[str, Any]) -> int:
        return int(record[field])

    on_time, late = split_by_rule(facts.broker, "views", time, lateness)
    return tumbling(on_time, time, lambda r: f"server-{r['server']}", 5_000, value=lambda r: r["arrival"] - r["ts"],
                    fold=max), len(late)


def _slowest(facts: JobFacts) -> str | None:
    """Exercise 2: two causes, the data time read from the view's arrival and a lateness that is not 1 s. The
    first leaves no view late whatever the lateness, so the second shows by the job's setting then."""
    lateness = facts.settings.get("allowed_lateness_ms")
    other_lateness = isinstance(lateness, int) and lateness != 1_000
    output = (window_results(facts), len(facts.late))
    by_arrival = any(output == _slowest_by(facts, "arrival", ms) for ms in {1_000, lateness} if isinstance(ms, int))
    rule_late = _slowest_by(facts, "ts", 1_000)[1]
    if by_arrival:
        lateness_shows = "the lateness it allows is not the 1 s the exercise asks for."
    else:
        lateness_shows = (f"it found {len(facts.late)} views late, where the rule with 1 s of allowed lateness "
                          f"finds {rule_late}.")

    def compare(f: JobFacts) -> str | None:
        windows, late = _slowest_by(f, "ts", 1_000)
        wrong = _same_windows(f, windows, "Each window should hold the longest delay (arrival - ts) of the on-time "
                                          "views of its server whose ts is in it.")
        if wrong:
            return wrong
        if len(f.late) != late:
            return f"The job found {len(f.late)} late views; judged by their event time, {late} are late."
        return None

    return _causes_left(facts, [
        Cause("not one view is late, although the network held some back by seconds;", lambda _f: by_arrival),
        Cause(lateness_shows, lambda _f: other_lateness),
    ], compare)


def _chosen_lateness(facts: JobFacts) -> str | None:
    lateness = facts.settings.get("allowed_lateness_ms")
    if lateness not in EX03_CHOICES:
        return f"allowed_lateness_ms={lateness!r} is not one of the choices {list(EX03_CHOICES)}."
    late_at = {ms: len(split_by_rule(facts.broker, "views", _ts, ms)[1]) for ms in EX03_CHOICES}
    smallest = next(ms for ms in EX03_CHOICES if late_at[ms] <= EX03_MOST_LATE)
    if len(facts.late) != late_at[lateness]:
        return (f"The job's late-data topic holds {len(facts.late)} records; with allowed_lateness_ms="
                f"{lateness} it should hold those the rule finds late. Did it read every view, once?")
    if len(facts.late) > EX03_MOST_LATE:
        return (f"With allowed_lateness_ms={lateness} the job found {len(facts.late)} late views: more "
                f"than {EX03_MOST_LATE}. Allow more.")
    if lateness != smallest:
        return (f"With allowed_lateness_ms={lateness} the job found {len(facts.late)} late views, within "
                "the limit; but a smaller lateness is enough, and with it every window fires sooner.")
    counted = sum(int(doc["value"]) for records in facts.sinks.values() for doc in records
                  if isinstance(doc, dict) and isinstance(doc.get("value"), int))
    total = sum(len(records) for _q, records in records_by_queue(facts.broker, "views"))
    if counted + len(facts.late) != total:
        return (f"The job's windows count {counted} views and {len(facts.late)} are late: {total} were "
                "expected together. Sink the window counts.")
    return None


_EX03 = Exercises("03", items={
    "Exercise 1": Exercise("predict", Hints(
        nudge="Walk the views in the order they arrived, keeping the watermark as you go.",
        concept="watermark = max(watermark, ts - allowed lateness), updated with every view in arrival "
                "order; a view is late when its ts is below the watermark at its arrival. It does not "
                "matter how late it is for its window.",
        call="With 1 000 ms: after 2 500 the watermark is 1 500, so 1 800 is on time; after 4 000 it is 3 000 "
             "... write down the ts of every view below it, in arrival order."),
        explain="Late is judged per view, against the watermark its queue had when it arrived.",
        same=lambda predicted, shown: sorted(predicted) == sorted(shown)),
    "Exercise 2": Exercise("debug", Hints(
        nudge="Two causes. The broken job finds no late view at all: why could nothing be out of order? Its "
              "explanation above gives each view's data time: which field is it? And read its properties as the "
              "job reads them: in which unit is each number?",
        concept="Lateness is judged in event time, the 'ts' of each view. Stamped with its arrival, each "
                "server's views are in order by construction, so none is ever late, and a window holds the "
                "views that arrived in it. allowed_lateness_ms is in milliseconds: 1 is one millisecond.",
        call='.select_timestamp(lambda v: v["ts"]) instead of v["arrival"], and "allowed_lateness_ms": 1_000; a '
             'new job id ("slowest-fixed"), run_until_idle().'),
        reads="views", judge=_judging(_slowest),
        refuse=_not_the_given(EX03_BROKEN)),
    "Exercise 3": Exercise("build", Hints(
        nudge="Run the job of the notebook for a few of the choices and compare job.late_records().",
        concept="More allowed lateness: fewer late views, but every window waits longer to fire. The "
                "smallest lateness that keeps the late views within the limit is the best trade.",
        call='RocketMQStream(views_per_window("pick-2000").build(), broker=broker, spark=spark, properties='
             '{"data_dir": str(DATA), "allowed_lateness_ms": 2_000}).run_until_idle(), then len(job.late_records()); '
             "try the next choice while it is too many."),
        reads="views", judge=_judging(_chosen_lateness)),
})

_ALL = {"02": _EX02, "03": _EX03}


def exercises_of(notebook: str, data_dir: str | None = None) -> Exercises:
    """The graded exercises of a notebook, by its number (``"00"`` to ``"07"``); their ledger lives in
    ``data_dir`` (default: the notebooks' ``rstream-data``, beside the notebook)."""
    found = _ALL[notebook]
    return found if data_dir is None else dataclasses.replace(found, data_dir=str(data_dir))


# notebook 01 ------------------------------------------------------------------------------------------
# (registered in _ALL here, at the end, so that each notebook's section stays apart from the others)

#: The broken job that Exercise 2 gives (by its id), and the topics of Exercises 1 and 2.
EX01_BROKEN, EX01_NEW_REVIEWS = "new-words-broken", "new-reviews"


def _texts(broker: Any, topic: str) -> Iterator[str]:
    """The UTF-8 texts of ``topic`` (a body that is not UTF-8 is no text: the job sends it to its
    dead-letter topic)."""
    for message in broker.read(topic):
        try:
            yield message.body.decode()
        except UnicodeDecodeError:
            continue


def _words(broker: Any, topic: str) -> dict[str, int]:
    """Per word, how often it occurs in the texts of ``topic``."""
    counts: dict[str, int] = {}
    for text in _texts(broker, topic):
        for word in text.split():
            counts[word] = counts.get(word, 0) + 1
    return counts


def _counts_written(facts: JobFacts) -> dict[Any, int]:
    """Per key, the count a job's sink topics hold: the last update of a count is its largest."""
    got: dict[Any, int] = {}
    for records in facts.sinks.values():
        for doc in records:
            if not (isinstance(doc, dict) and "key" in doc and isinstance(doc.get("value"), int)):
                raise _Off(f"The sink holds {doc!r}: a count is expected, written with "
                           "JsonSerializer(with_key=True) as {\"key\": word, \"value\": count}.")
            got[doc["key"]] = max(doc["value"], got.get(doc["key"], 0))
    if not got:
        raise _Off(f"The job's sink topics {list(facts.sinks)} hold no count: count per word, then "
                   ".to_rstream().sink(topic, JsonSerializer(with_key=True)).")
    return got


def _same_counts(facts: JobFacts, expected: dict[str, int], what: str) -> str | None:
    got = _counts_written(facts)
    return None if got == expected else f"{_difference(got, expected)} {what}"


#: Exercise 2's planted causes: a deserializer that reads every body (as Latin-1), and words not in lower case.
EX01_CAUSES = ["latin-1", "case"]


def _dead_letters(facts: JobFacts) -> int:
    """How many records the job's dead-letter topic (``<job>-dlq``) holds."""
    topic = f"{facts.job_id}-dlq"
    return len(facts.broker.read(topic)) if facts.broker.has_topic(topic) else 0


def _new_words_with(facts: JobFacts, causes: frozenset[str]) -> tuple[dict[str, int], int]:
    """What Exercise 2's job writes with ``causes`` left in: per word, its count, and how many records
    its dead-letter topic holds (those its deserializer cannot read)."""
    encoding = "latin-1" if "latin-1" in causes else "utf-8"
    counts: dict[str, int] = {}
    unreadable = 0
    for message in facts.broker.read(EX01_NEW_REVIEWS):
        try:
            text = message.body.decode(encoding)
        except UnicodeDecodeError:
            unreadable += 1
            continue
        for word in (text if "case" in causes else text.lower()).split():
            counts[word] = counts.get(word, 0) + 1
    return counts, unreadable


def _new_words_written(facts: JobFacts) -> tuple[dict[Any, int], int]:
    return _counts_written(facts), _dead_letters(facts)


def _new_review_words(facts: JobFacts) -> str | None:
    def shows(name: str) -> Callable[[JobFacts], bool]:
        return _showing(_new_words_with, _new_words_written, EX01_CAUSES, name)

    def compare(f: JobFacts) -> str | None:
        counts, unreadable = _new_words_with(f, frozenset())
        wrong = _same_counts(f, counts, "The sink should hold, per word of the new reviews in lower case, how "
                                        "often it occurs.")
        if wrong:
            return wrong
        if _dead_letters(f) != unreadable:
            return (f"The job's dead-letter topic holds {_dead_letters(f)} records; {unreadable} of the new "
                    "reviews are not UTF-8 text.")
        return None

    return _causes_left(facts, [
        Cause("its dead-letter topic is empty, yet a record that is not UTF-8 text was counted as a review;",
              shows("latin-1")),
        Cause("one word is counted under more than one key.", shows("case")),
    ], compare)


def _long_words(facts: JobFacts) -> str | None:
    expected = {w: n for w, n in _words(facts.broker, "reviews").items() if len(w) >= 4}
    return _same_counts(facts, expected, "The sink should hold every word of four letters or more in "
                        "'reviews', and how often it occurs; no shorter word.")


def _json_sink(job: Any) -> str | None:
    """A ``refuse``: a job whose sink writes text (``the:3``, as the notebook's jobs) cannot be read."""
    for topic in job.topology.sink_topics:
        for message in job.broker.read(topic)[:1] if job.broker.has_topic(topic) else []:
            try:
                json.loads(message.body)
            except ValueError:
                return (f"The job's sink topic {topic!r} holds text ({message.body[:40]!r}), not JSON: "
                        "sink with JsonSerializer(with_key=True), so the check can read each word and its count.")
    return None


def _same_named(*names: str) -> Callable[[Any, dict[str, int]], bool]:
    """A prediction's comparison: ``{names[0]: n, names[1]: m}``, or the pair ``(n, m)`` in that order (a
    prediction refused after the reveal cannot be retried, so its form must not fail it)."""
    def same(predicted: Any, shown: dict[str, int]) -> bool:
        if isinstance(predicted, (list, tuple)) and len(predicted) == len(names):
            predicted = dict(zip(names, predicted))
        return isinstance(predicted, dict) and {k: predicted.get(k) for k in shown} == shown
    return same


def _refusing(*refusals: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    def refuse(job: Any) -> str | None:
        return next((why for why in (r(job) for r in refusals) if why), None)
    return refuse


_EX01 = Exercises("01", items={
    "Exercise 1": Exercise("predict", Hints(
        nudge="Go batch by batch: how much does each batch take from each queue?",
        concept="max_records_per_queue caps what one batch reads from each queue; a queue with less waiting "
                "gives what it has. The lag after a batch is what is left to read in every queue together.",
        call="Queues of 7, 2 and 5 reviews with a cap of 3: the first batch reads 3 + 2 + 3. Go on until "
             "nothing is left. my_prediction = {\"batches\": ..., \"lag_after_first\": ...}"),
        explain="Each batch reads at most the cap from every queue; the longest queue sets the number of batches.",
        same=_same_named("batches", "lag_after_first")),
    "Exercise 2": Exercise("debug", Hints(
        nudge="Two causes. Compare the broken job's dead-letter topic (broken_job.errors()) with the records "
              "sent, and look for one word under several keys.",
        concept="A deserializer decides which bodies are records: one that reads every byte string (Latin-1 "
                "does) sends nothing to the dead-letter topic, but reads garbage as text. The key decides "
                "which count a word meets: 'Great' and 'great' are two keys, two counts.",
        call="TextDeserializer() (UTF-8) instead of TextDeserializer(\"latin-1\"), and key_by(lambda word: "
             'word.lower()) (or .map(str.lower) first); a new job id ("new-words-fixed"), '
             "run_until_idle(progress=False)."),
        reads=EX01_NEW_REVIEWS, judge=_judging(_new_review_words),
        refuse=_refusing(_not_the_given(EX01_BROKEN), _json_sink)),
    "Exercise 3": Exercise("build", Hints(
        nudge="It is the word count at the top of the notebook with one step added and another sink.",
        concept="filter(fn) keeps the records for which fn(value) is true. Put it after the split and "
                "before key_by, so the short words never cross the shuffle.",
        call='.flat_map(str.split).filter(lambda word: len(word) >= 4).key_by(lambda word: word).count(), '
             '.to_rstream().sink("long-word-counts", JsonSerializer(with_key=True)); then RocketMQStream('
             'builder.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)}).run_until_idle()'),
        reads="reviews", judge=_judging(_long_words), refuse=_json_sink),
})
_ALL["01"] = _EX01

# notebook 05 ------------------------------------------------------------------------------------------
# (its own section: the exercises of 05_joins, registered in _ALL at its end)

#: The broken job of Exercise 2 (by its id), its topics (the shop's next orders, and the profiles the
#: notebook's table reads), and the bound of Exercise 3's interval join, in ms.
EX05_BROKEN, EX05_NEXT, EX05_PROFILES, EX05_WITHIN = "order-tiers-broken", "next-orders", "profiles", 3_000


def _topic_records(broker: Any, topic: str) -> list[dict[str, Any]]:
    return [record for _queue, records in records_by_queue(broker, topic) for record in records]


def _joined(facts: JobFacts) -> list[tuple[Any, Any]]:
    """Every ``(key, value)`` a job's sinks wrote (``JsonSerializer(with_key=True)``), over all its sinks."""
    return [(doc["key"], doc["value"]) for records in facts.sinks.values() for doc in records
            if isinstance(doc, dict) and "key" in doc and "value" in doc]


def _no_result(facts: JobFacts) -> str:
    return (f"The job's sink topics {list(facts.sinks)} hold no result: sink the join with "
            "JsonSerializer(with_key=True).")


def _tier_changes(broker: Any) -> tuple[list[tuple[str, Any]], dict[str, set[Any]]]:
    """Each order of ``next-orders`` with its customer's tier as it was when the order came: the latest
    profile born before it (at the same time, the profile first: the stream–table join's order), None
    for a customer with no profile yet; sorted. And per order, the tiers its customer got only after it."""
    profiles = sorted(((m.born_timestamp, json.loads(m.body)) for m in broker.read(EX05_PROFILES)),
                      key=lambda bp: bp[0])
    when_ordered, later = [], {}
    for message in broker.read(EX05_NEXT):
        order = json.loads(message.body)
        mine = [(born, p.get("tier")) for born, p in profiles if p["user"] == order["user"]]
        before = [tier for born, tier in mine if born <= message.born_timestamp]
        when_ordered.append((order["order"], before[-1] if before else None))
        later[order["order"]] = {tier for born, tier in mine if born > message.born_timestamp}
    return sorted(when_ordered, key=repr), later


def _order_tiers(facts: JobFacts) -> str | None:
    """Exercise 2: every order of ``next-orders`` once, with its customer's tier when it came. Two causes:
    a join without a window against the profiles stream (a profile that comes later sends an order out
    again, or, taken before it, gives it a tier of later), and an inner join (an order whose customer has no
    profile never comes out)."""
    expected, later = _tier_changes(facts.broker)
    want = dict(expected)
    got = _joined(facts)
    if not got:
        return _no_result(facts)
    if not all(isinstance(v, dict) and "order" in v and "tier" in v for _k, v in got):
        return "Each result's value should be a dict with 'order' and 'tier', as the broken job's apply makes it."
    orders = [v["order"] for _k, v in got]
    twice = {o for o in orders if orders.count(o) > 1}
    of_later = {v["order"] for _k, v in got if v["tier"] != want.get(v["order"]) and v["tier"] in later.get(v["order"], ())}
    changed = sorted(twice | of_later, key=str)
    missing = sorted({o for o, tier in expected if tier is None} - set(orders), key=str)

    def compare(_f: JobFacts) -> str | None:
        answer = sorted(((v["order"], v["tier"]) for _k, v in got), key=repr)
        if answer == expected:
            return None
        return (f"{_difference(answer, expected)} Each order should come out once, with its customer's tier as "
                "the table held it when the order came.")

    return _causes_left(facts, [
        Cause(f"a profile that came after an order changed what was written for it, {len(changed)} order(s) "
              f"({', '.join(map(str, changed[:3]))}): written again, or with a tier of later;", lambda _f: bool(changed)),
        Cause(f"orders of customers with no profile never come out ({', '.join(map(str, missing[:3]))}).",
              lambda _f: bool(missing)),
    ], compare)


def _paid_within(facts: JobFacts) -> str | None:
    """Exercise 3: the orders with a payment 0 to 3 s after them (both bounds included), each once."""
    if "payments" not in facts.sources:
        return f"The job reads {list(facts.sources)}; it should join 'orders' with 'payments'."
    ordered = {o["order"]: o["ts"] for o in _topic_records(facts.broker, "orders")}
    expected = sorted(p["order"] for p in _topic_records(facts.broker, "payments")
                      if p["order"] in ordered and 0 <= p["ts"] - ordered[p["order"]] <= EX05_WITHIN)
    got = _joined(facts)
    if not got:
        return _no_result(facts)
    keys = sorted((k for k, _v in got), key=str)
    if keys == expected:
        return None
    missing = sorted(set(expected) - set(keys))
    extra = sorted(set(keys) - set(expected), key=str)
    parts = [f"{len(keys)} results, {len(expected)} expected"]
    if missing:
        parts.append(f"not paired but should be: {missing}")
    if extra:
        parts.append(f"should not come out: {extra}")
    if len(set(keys)) < len(keys):
        parts.append("some orders come out more than once")
    return ("; ".join(parts) + ". An inner interval join emits an order only with a payment 0 to 3 s after "
            "it, both bounds included.")


def _same_times_out(predicted: Any, shown: dict[str, int]) -> bool:
    return (isinstance(predicted, dict)
            and {str(k): int(v) for k, v in predicted.items() if v} == shown)


_EX05 = Exercises("05", items={
    "Exercise 1": Exercise("predict", Hints(
        nudge="For each paid order, list the sliding windows that hold its order's time, then keep those "
              "that also hold its payment's time.",
        concept="A window join pairs an order and its payment in every window that holds both. Windows of 10 s "
                "that start every 5 s: each time is in two of them. Count the starts s (multiples of 5 s, "
                "negative ones too) with s <= both times < s + 10 s.",
        call="o1 (ordered at 4.0 s, paid at 6.1 s): [0 s, 10 s) holds both, [-5 s, 5 s) only the order, "
             "[5 s, 15 s) only the payment, so 1. o3 (23.0 s, paid at 24.4 s): [15 s, 25 s) and [20 s, 30 s) "
             "hold both, so 2. Do the same for the others; o11 has no payment."),
        explain="A sliding window join emits a pair once per window the two records share.",
        same=_same_times_out),
    "Exercise 2": Exercise("debug", Hints(
        nudge="Two causes. Which orders come out twice, or with a tier their customer got only later? Which "
              "orders never come out, and whose are they?",
        concept="Joined with a stream and no window, a record on either side emits: a profile that changes "
                "later sends the customer's last order out again. Joined with a table (to_table()), only the "
                "orders emit, each once. An inner join (join) drops an order that finds no profile; a left "
                "join (left_join) keeps it, with None.",
        call='tiers = profiles.key_by(lambda p: p["user"]).map(lambda p: p["tier"]).to_table(); '
             'next_orders.left_join(tiers).where(lambda o: o["user"]).apply(lambda o, tier: {"order": o["order"], '
             '"tier": tier}); a new job id ("order-tiers-fixed"), run_until_idle(progress=False).'),
        reads=EX05_NEXT, judge=_judging(_order_tiers),
        refuse=_not_the_given(EX05_BROKEN)),
    "Exercise 3": Exercise("build", Hints(
        nudge="It is the interval join of the notebook with two things changed.",
        concept="between(lower, upper) pairs an order at l with a payment at r when lower <= r - l <= upper. "
                "An inner join (join, not left_join) emits only the pairs, no order without a payment.",
        call='orders.join(payments).where(lambda o: o["order"]).equal_to(lambda p: p["order"])'
             ".between(Time.seconds(0), Time.seconds(3)).apply(...).sink(new topic, "
             "JsonSerializer(with_key=True)); RocketMQStream(..., properties=PROPS).run_until_idle()"),
        reads="orders", judge=_judging(_paid_within)),
})

_ALL["05"] = _EX05

# notebook 00 ------------------------------------------------------------------------------------------
# (its own section: the exercises of 00_start_here, registered in _ALL at its end)

#: The broken job of Exercise 2 (by its id), the notebook's own word count (by its id), and their topic.
EX00_BROKEN, EX00_NOTEBOOK_JOB, EX00_REVIEWS = "review-words-broken", "review-words", "reviews"


def _first_words(broker: Any, topic: str) -> dict[str, int]:
    """Per first word, how many texts of ``topic`` begin with it (a text with no word has none)."""
    counts: dict[str, int] = {}
    for words in (text.split() for text in _texts(broker, topic)):
        if words:
            counts[words[0]] = counts.get(words[0], 0) + 1
    return counts


#: Exercise 2's planted causes: whole reviews counted (no split), and a filter left in (reviews that say
#: ``EX00_KEPT`` only).
EX00_CAUSES, EX00_KEPT = ["whole", "filter"], "great"


def _review_words_with(facts: JobFacts, causes: frozenset[str]) -> dict[str, int]:
    """What Exercise 2's job counts with ``causes`` left in."""
    counts: dict[str, int] = {}
    for text in _texts(facts.broker, EX00_REVIEWS):
        if "filter" in causes and EX00_KEPT not in text:
            continue
        for item in [text] if "whole" in causes else text.split():
            counts[item] = counts.get(item, 0) + 1
    return counts


def _review_words(facts: JobFacts) -> str | None:
    def shows(name: str) -> Callable[[JobFacts], bool]:
        return _showing(_review_words_with, _counts_written, EX00_CAUSES, name)

    return _causes_left(facts, [
        Cause("its keys are not single words;", shows("whole")),
        Cause("some reviews of the topic left no trace at all in its counts.", shows("filter")),
    ], lambda f: _same_counts(f, _review_words_with(f, frozenset()),
                              "The sink should hold, per word of the reviews, how often it occurs."))


def _reviews_per_first_word(facts: JobFacts) -> str | None:
    return _same_counts(facts, _first_words(facts.broker, EX00_REVIEWS),
                        "The sink should hold, per first word, how many reviews begin with it.")


def _not_the_notebooks_job(job: Any) -> str | None:
    """A ``refuse``: the word count from the top of notebook 00 is not an answer to an exercise."""
    if job.job_id == EX00_NOTEBOOK_JOB:
        return ("That is the word count from the top of the notebook (job 'review-words'), not a new job. "
                "Build your own job, with a new id, and run it.")
    return None


def _same_number(predicted: Any, shown: Any) -> bool:
    """Exercise 1's comparison: one number (a bool is no number)."""
    return isinstance(predicted, (int, float)) and not isinstance(predicted, bool) and predicted == shown


_EX00 = Exercises("00", items={
    "Exercise 1": Exercise("predict", Hints(
        nudge="Count words, not reviews. And a word that comes twice: how many times is it counted?",
        concept="count() keeps one count per word. Each word it reads makes that word's count one bigger, "
                "and the job writes the new count to the sink topic: one message for every word read, "
                "even when the same word comes twice.",
        call="Count the words of each of the two reviews (a repeated word counts again), then add: "
             "my_prediction = words of the first + words of the second."),
        explain="The job writes one updated count for every word it reads, a repeated word too.",
        same=_same_number),
    "Exercise 2": Exercise("debug", Hints(
        nudge="Two causes. Read the broken job step by step, as the records go: what does each step let "
              "through, and what reaches count()?",
        concept="A job counts whatever reaches count(): each review must first be split into its words "
                "(flat_map gives one record per word), and a filter(fn) drops every record for which fn is "
                "false, for good.",
        call='Add .flat_map(str.split) right after .source(...), and take out .filter(...); give the job a '
             'new id ("review-words-fixed"), then run_until_idle(progress=False).'),
        reads=EX00_REVIEWS, judge=_judging(_review_words),
        refuse=_refusing(_not_the_given(EX00_BROKEN), _not_the_notebooks_job, _json_sink)),
    "Exercise 3": Exercise("build", Hints(
        nudge="It is the word count at the top of the notebook, but each review gives one word only.",
        concept="map(fn) turns each record into one new record: here a review into its first word. "
                "Then key each first word by itself and count, as for all the words.",
        call='.map(lambda text: text.split()[0]).key_by(lambda word: word).count().to_rstream()'
             '.sink("first-word-counts", JsonSerializer(with_key=True)); then RocketMQStream('
             'first_builder.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})'
             ".run_until_idle(progress=False)"),
        reads=EX00_REVIEWS, judge=_judging(_reviews_per_first_word),
        refuse=_refusing(_not_the_notebooks_job, _json_sink)),
})

_ALL["00"] = _EX00

# notebook 04 ------------------------------------------------------------------------------------------
# (its own section: the exercises of 04_state_and_replay, registered in _ALL at its end)

#: The broken job of Exercise 2 (by its id), and the topics Exercises 2 and 3 read.
EX04_BROKEN, EX04_CREDIT, EX04_MOVES = "credit-totals-broken", "credit-log", "moves"


def _keyed_values(facts: JobFacts) -> list[tuple[Any, Any]]:
    """Every ``(key, value)`` a job's sinks wrote (``JsonSerializer(with_key=True)``); raises ``_Off`` when
    a sink holds anything else, or nothing."""
    got = []
    for topic, records in facts.sinks.items():
        for doc in records:
            if not (isinstance(doc, dict) and "key" in doc and "value" in doc):
                raise _Off(f"The sink {topic!r} holds {doc!r}: write with JsonSerializer(with_key=True), so "
                           "each message is {\"key\": ..., \"value\": ...}.")
            got.append((doc["key"], doc["value"]))
    if not got:
        raise _Off(f"The job's sink topics {list(facts.sinks)} hold nothing.")
    return got


def _running_balances(broker: Any, topic: str) -> dict[str, list[int]]:
    """Per customer, the balance after each of their moves in ``topic`` (one queue: in offset order)."""
    balances: dict[str, int] = {}
    out: dict[str, list[int]] = {}
    for move in _topic_records(broker, topic):
        balances[move["user"]] = balances.get(move["user"], 0) + move["amount"]
        out.setdefault(move["user"], []).append(balances[move["user"]])
    return out


def _read_something(job: Any) -> str | None:
    """Exercise 2's ``refuse``: a job that was started but committed no batch read nothing (a job that
    starts at its topics' end finds nothing there): say that, rather than that it never ran."""
    from pathlib import Path

    started = Path(job.job_dir, "initial-offsets.json").exists() if hasattr(job, "job_dir") else False
    if started and not job.history():
        held = sum(job.broker.end_offsets(EX04_CREDIT)) if job.broker.has_topic(EX04_CREDIT) else 0
        return (f"Job {job.job_id!r} ran, but committed no batch: it read none of the {held} moves "
                f"{EX04_CREDIT!r} holds.")
    return None


def _credit_totals(facts: JobFacts) -> str | None:
    """Exercise 2: per customer, the balance after every move of ``credit-log``, in order, kept as the job's
    state. Two causes: the balances kept in a Python dict (no state of the job's), and a job that starts
    reading at the topic's end (``consume_from``)."""
    expected = _running_balances(facts.broker, EX04_CREDIT)
    got: dict[str, list[Any]] = {}
    for key, value in _keyed_values(facts):
        got.setdefault(str(key), []).append(value)
    moves, written = sum(map(len, expected.values())), sum(map(len, got.values()))

    def compare(_f: JobFacts) -> str | None:
        if got == expected:
            return None
        return (f"{_difference(got, expected)} Per customer, the sink should hold the balance after each of their "
                "moves, in the order of the topic.")

    return _causes_left(facts, [
        Cause("job.state() holds no balance: the job keeps none in its state, so no state topic could give "
              "one back;", lambda f: not f.state_keys),
        Cause(f"it wrote a balance for {written} of the {moves} moves in the topic.", lambda _f: written < moves),
    ], compare)


def _overdrawn(facts: JobFacts) -> str | None:
    """Exercise 3: per customer of ``moves``, every store credit balance below zero after one of its moves."""
    balances: dict[str, int] = {}
    expected: dict[str, list[int]] = {}
    for move in _topic_records(facts.broker, EX04_MOVES):
        balances[move["user"]] = balances.get(move["user"], 0) + move["amount"]
        if balances[move["user"]] < 0:
            expected.setdefault(move["user"], []).append(balances[move["user"]])
    got: dict[str, list[Any]] = {}
    for key, value in _keyed_values(facts):
        got.setdefault(str(key), []).append(value)
    got = {k: _sorted(v) for k, v in got.items()}
    expected = {k: sorted(v) for k, v in expected.items()}
    if got == expected:
        return None
    return (f"{_difference(got, expected)} Per customer, the sink should hold its balance after every move that "
            "left it below zero (the running sum of the amounts, in the order of the topic), and nothing else.")


def _sorted(values: list[Any]) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:  # values of mixed kinds: not balances, and the check says so
        return values


_EX04 = Exercises("04", items={
    "Exercise 1": Exercise("predict", Hints(
        nudge="Go round by round: which customers does each round change? Then: what does a replay read?",
        concept="After each batch, the state topic gets one message per key the batch changed, with the key's "
                "value at the end of the batch (RIP-58's changelog). A queue whose local state is gone "
                "rebuilds it from the state topic: the latest message of every key it holds.",
        call="Round 1 changes ann and bob, so 2 messages, not 3. Do the same for rounds 2 and 3 and add up; "
             "the replay gives back every customer the state topic knows. my_prediction = {\"messages\": ..., "
             "\"replayed_keys\": ...}"),
        explain="A batch writes one state message per changed key; a replay reads each key's latest one.",
        same=_same_named("messages", "replayed_keys")),
    "Exercise 2": Exercise("debug", Hints(
        nudge="Two causes. Look at job.state() of the broken job, and count its balances against the moves in "
              "the topic. Where does each balance live, and where did the job start reading?",
        concept="Only state the job keeps (count, sum, ... after key_by) goes to the state topic and comes back "
                "by replay; a Python dict in a function lives in one worker's memory and is lost with it. A new "
                "job reads from a topic's first offset unless told to start at its end (consume_from).",
        call='key_by(lambda m: m["user"]).sum(lambda m: m["amount"]) instead of the map over a dict, and no '
             '"consume_from": "last"; a new job id ("credit-totals-fixed"), run_until_idle(progress=False).'),
        reads=EX04_CREDIT, judge=_judging(_credit_totals),
        refuse=_refusing(_not_the_given(EX04_BROKEN), _read_something)),
    "Exercise 3": Exercise("build", Hints(
        nudge="It is the store credit job of the top of the notebook, with one step added and another sink.",
        concept="sum emits the new balance after every record. "
                "After to_rstream(), filter(fn) gets that balance as its value and keeps what fn accepts.",
        call='key_by(lambda m: m["user"]).sum(lambda m: m["amount"]).to_rstream()'
             '.filter(lambda balance: balance < 0).sink("overdrawn", JsonSerializer(with_key=True)); '
             'RocketMQStream(..., properties={"data_dir": str(DATA)}).run_until_idle(progress=False)'),
        reads=EX04_MOVES, judge=_judging(_overdrawn)),
})

_ALL["04"] = _EX04
# notebook 06 ------------------------------------------------------------------------------------------
# (its own section: the exercises of 06_scaling_and_failure, registered in _ALL at its end)

#: The source topic of notebook 06's jobs, Exercise 2's broken job (by its id) and the word its support
#: queue takes the reviews with, and the topic of Exercise 3's orders.
EX06_SOURCE, EX06_BROKEN, EX06_ALERT, EX06_ORDERS = "reviews", "support-feed-broken", "BROKE", "orders"


@dataclass(frozen=True)
class LostExecutor:
    """An executor Spark's driver lost: its name as a job's progress gives it, when, and Spark's reason."""

    executor: str
    lost_ms: int
    reason: str


def executors_lost(spark: Any) -> list[LostExecutor]:
    """The executors this Spark application lost, oldest first: Spark's own record (the driver's status
    store, which keeps dead executors with their remove time and reason), not anything the notebook says."""
    context = spark.sparkContext._jsc.sc()
    try:  # the store is kept by a listener: let it take in the events already posted (a loss just now)
        context.listenerBus().waitUntilEmpty(2_000)
    except Exception:
        pass
    listed = context.statusStore().executorList(False)
    lost = []
    for i in range(listed.size()):
        summary = listed.apply(i)
        if summary.isActive() or summary.id() == "driver" or not summary.removeTime().isDefined():
            continue
        reason = str(summary.removeReason().get()) if summary.removeReason().isDefined() else ""
        lost.append(LostExecutor(f"executor-{summary.id()}", int(summary.removeTime().get().getTime()), reason))
    return sorted(lost, key=lambda e: e.lost_ms)


#: Exercise 2: per lost executor that a check counted, the job and its last batch then. A loss counts for
#: one run of the job: a job that ran on after it needs another kill (checking again unchanged is fine).
_CREDITED: dict[str, tuple[str, int]] = {}


def _check_survived(exercise: str, job: Any, hints: Hints, source: str, exact: Callable[[Any], str | None],
                    what: str) -> Graded:
    """A job through a lost executor: an executor was lost while ``job`` ran (Spark's record, a loss after
    the notebook's own kill, not counted before for a job that has run since), the job read ``source`` (its
    records are ``what``), committed a batch of new ones after the loss and read them all, and
    ``exact(job)`` finds nothing wrong with its state and sink."""
    from .exercises import NOT_YET, RIGHT, WRONG

    def wrong(message: str) -> Graded:
        return Graded(exercise, WRONG, message, hints)

    if job is None or job is Ellipsis:
        return Graded(exercise, NOT_YET, "Put the job in the cell above, run it, then this one.", hints)
    if not all(hasattr(job, name) for name in ("topology", "broker", "history", "lag", "state", "spark")):
        return wrong(f"A job (a RocketMQStream that ran through a kill) is expected; your answer is of type "
                     f"{type(job).__name__}. Results typed in or computed without the job say nothing about "
                     "what survived the kill.")
    history = job.history()
    if not history:
        return wrong(f"Job {job.job_id!r} has not run yet (no committed batch).")
    if source not in job.topology.source_topics:
        return wrong(f"Job {job.job_id!r} reads {list(job.topology.source_topics)}, not {source!r}.")
    try:
        lost = executors_lost(job.spark)
    except Exception as exc:
        return wrong(f"Could not read Spark's record of its executors ({type(exc).__name__}: {exc}): does "
                     "the job run on the cluster?")
    if len(lost) < 2:
        return wrong(f"Spark lost {len(lost)} executor(s) in this application"
                     + (f" ({lost[0].executor}, the one the notebook killed above)" if lost else "")
                     + ". Kill another one while the job runs: cluster.kill_executor(...).")
    last = lost[-1]
    last_batch = max((b.batch_id for b in history if b.records_in), default=-1)  # not an idle trigger's
    before = [b for b in history if b.timestamp_ms and b.timestamp_ms < last.lost_ms]
    after = [b for b in history if b.timestamp_ms > last.lost_ms
             and any(q.topic == source and q.records_in for q in b.queues)]
    if not before:
        return wrong(f"Job {job.job_id!r} committed no batch before {last.executor} was lost: the kill must "
                     "come while the job runs.")
    if not after:
        return wrong(f"Spark lost {last.executor}, but job {job.job_id!r} has read no new {what} since: send a "
                     "round after the kill, then run_until_idle(), so the job runs past the loss.")
    credited = _CREDITED.get(last.executor)
    if credited is not None and credited != (job.job_id, last_batch):
        return wrong(f"No executor was lost since this check counted the loss of {last.executor} (for job "
                     f"{credited[0]!r}, up to batch {credited[1]}); the job has run on since. A loss counts "
                     "once: kill another executor, then send a round.")
    ran_on_lost = sorted({b.batch_id for b in after for q in b.queues if q.executor == last.executor})
    if ran_on_lost:
        return wrong(f"Batches {ran_on_lost} ran on {last.executor} after Spark lost it: that is not a loss.")
    lag = job.lag()
    left = int(lag["lag"].sum()) if len(lag) else 0
    if left:
        return wrong(f"Job {job.job_id!r} has {left} records left to read: run_until_idle() until it is done.")
    try:
        off = exact(job)
    except _Off as found:
        off = str(found)
    except Exception as exc:
        off = f"Could not read the job's results ({type(exc).__name__}: {exc})."
    if off:
        return wrong(off)
    _CREDITED[last.executor] = (job.job_id, last_batch)
    executors = sorted({q.executor for b in after for q in b.queues})
    return Graded(exercise, RIGHT, f"Spark lost {last.executor}; job {job.job_id!r} then committed "
                  f"{len(after)} batch(es) of new {what} on {', '.join(executors)}, replaying "
                  f"{sum(b.replayed_keys for b in after)} keys, and every result is exact. Well done.")


def _texts_written(broker: Any, topic: str) -> list[str]:
    """The texts a topic holds: a JSON string's value (``JsonSerializer()``), else the body as text."""
    out = []
    for message in broker.read(topic) if broker.has_topic(topic) else []:
        try:
            doc = json.loads(message.body)
        except ValueError:
            doc = None
        out.append(doc if isinstance(doc, str) else message.body.decode(errors="replace"))
    return out


def _through_a_crash(job: Any) -> str | None:
    """Exercise 2's ``refuse`` (after the broken job's): a task of the job was made to die before its commit
    (``crash_once``), and one did."""
    from pathlib import Path

    from rstream.runtime.commit import crash_file

    armed = Path(crash_file(job.job_dir, "before_commit"))
    if not armed.parent.is_dir():
        return (f"No task of job {job.job_id!r} was made to die, so it cannot show what a crash does: arm one "
                "before the run, as support_feed does (job.crash_once(\"before_commit\")).")
    if armed.exists() and job.history():
        return (f"A crash is armed for job {job.job_id!r}, but no task of it reached its commit with records "
                "to write: does it sink anything?")
    return None


def _guarantee(facts: JobFacts) -> str:
    value = facts.settings.get("processing_guarantee", "exactly_once")
    return str(getattr(value, "value", value))


def _support_feed(facts: JobFacts) -> str | None:
    """Exercise 2: every review upper-cased once in ``<job>-out``, and those that say ``EX06_ALERT`` once in
    ``<job>-broke``, through a task that died before its commit. Two causes: at least once (the sink written
    before the commit, so again by the retry), and the support queue written by a function (foreach), which
    no commit covers."""
    from collections import Counter

    reviews = [text.upper() for text in _texts(facts.broker, EX06_SOURCE)]
    index, support = f"{facts.job_id}-out", f"{facts.job_id}-broke"
    want_index, want_support = Counter(reviews), Counter(r for r in reviews if EX06_ALERT in r)
    got_index = Counter(_texts_written(facts.broker, index))
    got_support = Counter(_texts_written(facts.broker, support))
    twice_index, twice_support = sum((got_index - want_index).values()), sum((got_support - want_support).values())

    def compare(_f: JobFacts) -> str | None:
        for topic, got, want in ((index, got_index, want_index), (support, got_support, want_support)):
            if got != want:
                return (f"The topic {topic!r} holds {sum(got.values())} reviews, {sum((got - want).values())} "
                        f"more than it should and {sum((want - got).values())} fewer: it should hold "
                        f"{sum(want.values())}, each once.")
        return None

    return _causes_left(facts, [
        Cause(f"the search index ({index!r}) holds {twice_index} reviews twice;",
              lambda f: twice_index > 0 or _guarantee(f) != "exactly_once"),
        Cause(f"the support queue ({support!r}) holds {twice_support} reviews twice"
              + (", though the search index holds each once." if not twice_index else "."),
              lambda f: support not in f.sinks),
    ], compare)


def _revenue_exact(job: Any) -> str | None:
    """Exercise 3's exactness: per customer, the job's state holds the sum of the amounts of ``orders``, and
    its sink the running totals, each step one order's amount, each order once."""
    from collections import Counter

    amounts: dict[str, list[int]] = {}
    for order in _topic_records(job.broker, EX06_ORDERS):
        amounts.setdefault(str(order["user"]), []).append(int(order["amount"]))
    expected = {user: sum(a) for user, a in amounts.items()}
    state = job.state()
    totals = {str(k): v for k, v in zip(state["key"], state["value"])} if len(state) else {}
    if totals != expected:
        return (f"The job's state: {_difference(totals, expected)} Per customer it should hold the sum of their "
                "orders' amounts, every order of 'orders' counted once, across the kill.")
    running: dict[str, list[int]] = {}
    for topic in job.topology.sink_topics:
        for message in sorted(job.broker.read(topic), key=lambda m: (m.queue_id, m.offset)):
            doc = json.loads(message.body)
            if not (isinstance(doc, dict) and "key" in doc and isinstance(doc.get("value"), int)):
                return (f"The sink {topic!r} holds {doc!r}: a running total per customer is expected, written "
                        "with JsonSerializer(with_key=True).")
            running.setdefault(str(doc["key"]), []).append(doc["value"])
    uneven = sorted(user for user, values in amounts.items()
                    if Counter(b - a for a, b in zip([0, *running.get(user, [])], running.get(user, [])))
                    != Counter(values))
    if uneven:
        return (f"The sink's running totals of {uneven[:3]} do not go up by one order's amount a step, each "
                "order once: something was lost or written twice.")
    return None


def _same_executor_count(predicted: Any, shown: dict[str, int]) -> bool:
    return (isinstance(predicted, int) and not isinstance(predicted, bool)
            and predicted == shown["most executors counting in one batch"])


class _Exercises06(Exercises):
    """Notebook 06's exercises: Exercise 3 is checked by ``_check_survived`` (a job of the learner's through a
    lost executor: Spark's record and the job's batches, besides its results), the others as every
    notebook's."""

    def judge(self, exercise: str, answer: Any = None) -> Graded:
        spec = self.items[exercise]
        if spec.kind == "survive":
            return _check_survived(exercise, answer, spec.hints, EX06_ORDERS, _revenue_exact, "orders")
        return super().judge(exercise, answer)


_EX06 = _Exercises06("06", items={
    "Exercise 1": Exercise("predict", Hints(
        nudge="Count the tasks that count orders in one batch. Which topic do they read, and how many "
              "queues does it have?",
        concept="The count reads the shuffle topic. One task per queue per batch, and one queue's task "
                "runs on one executor at a time. So the shuffle topic's queues cap how many executors "
                "count at once, whatever the cluster has.",
        call="shuffle_queues=1: one counting task per batch. my_prediction = the number of executors "
             "that one task can run on at once."),
        explain="The number of queues caps parallelism: a core with no queue to run has nothing to count.",
        same=_same_executor_count),
    "Exercise 2": Exercise("debug", Hints(
        nudge="Two causes. Which of the two topics holds reviews twice, and what writes each of them: a sink "
              "of the job, or something else?",
        concept="A task that dies before its commit runs again from the last commit. At least once, its sink "
                "records were written before the commit, so the retry writes them again; exactly once, they "
                "go to the broker with the commit. Anything a function does on its own (foreach sending to "
                "the broker) is no part of any commit: the retry does it again, whatever the guarantee.",
        call='processing_guarantee "exactly_once", and the support queue as a second sink of the job: '
             'upper.filter(lambda text: "BROKE" in text).sink(f"{job_id}-broke", JsonSerializer()) instead of '
             'the foreach; a new job id ("support-feed-fixed"), crash_once("before_commit"), '
             "run_until_idle(progress=False)."),
        reads=EX06_SOURCE, judge=_judging(_support_feed),
        refuse=_refusing(_not_the_given(EX06_BROKEN), _through_a_crash)),
    "Exercise 3": Exercise("survive", Hints(
        nudge="Build the job, run it on the first round, lose an executor as the notebook did, then send the "
              "second round and run it again.",
        concept="key_by(customer).sum(amount) keeps each customer's revenue as state, per shuffle queue. When "
                "an executor is lost, its queues run elsewhere and replay their state from the state topic; "
                "each round counted exactly once. The check reads Spark's record of the lost executors, the "
                "job's batches, its state and its sink.",
        call='StreamBuilder("revenue"); .source("orders", JsonDeserializer()).key_by(lambda o: o["user"])'
             '.sum(lambda o: o["amount"]).to_rstream().sink("revenue", JsonSerializer(with_key=True)); '
             'RocketMQStream(..., properties={"data_dir": str(DATA / "job")}); run_until_idle(); '
             "cluster.kill_executor(cluster.executors()[0]); broker.send_batch(\"orders\", ...); "
             "run_until_idle()")),
})

_ALL["06"] = _EX06

# notebook 07 ------------------------------------------------------------------------------------------
# (its own section: the exercises of 07_rocketmq, registered in _ALL at its end)

#: The broken job of Exercise 2 (by its id), the notebook's own word count (by its id), the topics Exercises
#: 2 and 3 read (on the RocketMQ broker: orders as JSON, and the order log as text), Exercise 2's window size
#: (ms), and the decision log's topic (``RocketMQBroker``'s).
EX07_BROKEN, EX07_NOTEBOOK_JOB, EX07_EVENTS, EX07_ORDERS = (
    "order-windows-broken", "wordcount", "order-events", "order-log")
EX07_WINDOW, EX07_DECISIONS = 30_000, "rstream_txn"


def _not_the_rocketmq_word_count(job: Any) -> str | None:
    """A ``refuse``: the word count that notebook 07 runs on RocketMQ is not an answer to an exercise."""
    if job.job_id == EX07_NOTEBOOK_JOB:
        return ("That is the notebook's word count (job 'wordcount'), not a new job: build your own, with a "
                "new id, and run it.")
    return None


def _customer_and_product(key: Any) -> tuple[str, ...] | None:
    """The (customer, product) a window result's key names: a pair, or a text naming both (``ann/mug``)."""
    if isinstance(key, (list, tuple)) and len(key) == 2:
        return tuple(map(str, key))
    if isinstance(key, str):
        names = [n for n in re.split(r"[^a-z]+", key) if n]
        return tuple(names) if len(names) == 2 else None
    return None


def _order_windows(facts: JobFacts) -> str | None:
    """Exercise 2: per customer and product, the orders of ``order-events`` in 30 s windows of the order's
    time, each result a RocketMQ message with one key. Two causes: a key with a space (the official
    client reads ``KEYS`` as a set of words), and windows of the born time (the official client's clock,
    in whole seconds) instead of the order's ``ts``."""
    lateness = facts.settings.get("allowed_lateness_ms")
    on_time, _ = split_by_rule(facts.broker, EX07_EVENTS, _ts, lateness if isinstance(lateness, int) else 2_000)
    expected = tumbling(on_time, _ts, lambda o: (str(o["user"]), str(o["product"])), EX07_WINDOW)
    messages = [m for topic in facts.sinks for m in facts.broker.read(topic)]
    spaced = [m.key for m in messages if isinstance(m.key, str) and any(c.isspace() for c in m.key)]
    windows = window_results(facts)
    starts = [k[1] for k in windows if isinstance(k[1], int)]

    def compare(f: JobFacts) -> str | None:
        if not windows:
            return _same_windows(f, expected, "")
        got = {(_customer_and_product(key) or key, start, end): n for (key, start, end), n in windows.items()}
        if got == expected:
            return None
        return (f"{_difference(got, expected)} Per customer and product, each 30 s window of the orders' time "
                "should hold how many orders they made in it.")

    return _causes_left(facts, [
        Cause("the official client receives each of its messages with more than one key (one of them: "
              f"{sorted(spaced[0].split()) if spaced else []});", lambda _f: bool(spaced)),
        Cause(f"its windows start at {min(starts) if starts else 0} ms: the clock of this year, not the time "
              "the orders were placed.", lambda _f: bool(starts) and min(starts) > 10 ** 12),
    ], compare)


def _decisions(broker: Any, job_id: str) -> list[dict[str, Any]]:
    """The decision log's entries about ``job_id``'s ranges (``rstream_txn``: open and commit, per attempt)."""
    if not broker.has_topic(EX07_DECISIONS):
        raise _Off("The job's broker keeps no decision log: this exercise runs on the notebook's RocketMQ.")
    out = []
    for message in broker.read(EX07_DECISIONS):
        entry = json.loads(message.body)
        if isinstance(entry.get("range"), list) and entry["range"] and entry["range"][0] == job_id:
            out.append(entry)
    return out


def _loyalty_feed(facts: JobFacts) -> str | None:
    """Exercise 3: per customer, how many orders the order log holds, and every sink record visible on commit:
    the decision log names the sink's queues under ``half`` of the job's attempts (RocketMQ half messages,
    committed once the attempt won), never under ``out`` (plain messages, seen at once)."""
    wrong = _same_counts(facts, _first_words(facts.broker, EX07_ORDERS),
                         "The sink should hold, per customer (the first word of a line of 'order-log'), how many "
                         "orders they made.")
    if wrong:
        return wrong
    entries = _decisions(facts.broker, facts.job_id)
    sinks = set(facts.sinks)
    plain = sorted({q for e in entries if e.get("t") == "commit" for q in e.get("out", {})
                    if q.rpartition("/")[0] in sinks})
    held = sorted({q for e in entries if e.get("t") == "open" for q in e.get("half", [])
                   if q.rpartition("/")[0] in sinks})
    if plain or not held:
        return (f"The job wrote its sink as plain messages ({', '.join(plain[:3]) or 'none held back'}): a consumer "
                "of the official client sees each as soon as it is written, a lost attempt's too. The loyalty "
                "app must only ever see records whose attempt committed.")
    return None


_EX07 = Exercises("07", items={
    "Exercise 1": Exercise("predict", Hints(
        nudge="Which input ranges does the job read in its one batch? Each is decided by one attempt.",
        concept="On RocketMQ each task's append is an attempt, and an attempt commits one input range: a "
                "source queue's or a shuffle queue's. The source side of a word count writes the shuffle topic; "
                "the side that counts writes the state topic and the sink, in its own attempt.",
        call="Two source queues with reviews and one shuffle queue: one commit per range read. The sink is "
             "written where the count runs. my_prediction = {\"commits\": ..., \"commits_with_sink\": ...}"),
        explain="One attempt per input range; the sink is written with the state, by the shuffle side's attempt.",
        same=_same_named("commits", "commits_with_sink")),
    "Exercise 2": Exercise("debug", Hints(
        nudge="Two causes. Read one message of the sink with the official client (consume(...)): how many keys "
              "does it have? And when do its windows start?",
        concept="A RocketMQ message's KEYS is a set of words: a key with a space in it reaches the official "
                "client as several keys. Without select_timestamp, a record's data time is its born time: on "
                "RocketMQ the producer's clock, which the official client stamps in whole seconds.",
        call='key_by(lambda o: f"{o[\'user\']}/{o[\'product\']}") (no space), and .select_timestamp(lambda o: '
             'o["ts"]) after .source(...); a new job id ("order-windows-fixed"), run_until_idle(progress=False).'),
        reads=EX07_EVENTS, judge=_judging(_order_windows),
        refuse=_refusing(_not_the_given(EX07_BROKEN), _not_the_rocketmq_word_count)),
    "Exercise 3": Exercise("build", Hints(
        nudge="A count per customer of the order log (the first word of a line), with a sink the official "
              "client only ever sees committed.",
        concept="On RocketMQ, an attempt's plain messages are visible at once, a lost attempt's too. A sink made "
                "with visible=\"on_commit\" sends RocketMQ half messages, which the broker shows only once the "
                "decision log says the attempt won.",
        call='StreamBuilder("loyalty-feed"); .source("order-log", TextDeserializer()).map(lambda line: '
             'line.split()[0]).key_by(lambda c: c).count().to_rstream().sink("loyalty-counts", '
             'JsonSerializer(with_key=True), visible="on_commit"); RocketMQStream(..., broker=broker, spark=spark, '
             'properties={"data_dir": str(DATA / "job")}).run_until_idle(progress=False)'),
        reads=EX07_ORDERS, judge=_judging(_loyalty_feed),
        refuse=_refusing(_not_the_rocketmq_word_count, _json_sink)),
})

_ALL["07"] = _EX07
