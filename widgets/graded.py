"""The graded exercises of notebooks 00 to 07, kept in the package so that no check cell shows (or
computes, in plain sight) what the answer is. Each exercise is one of three kinds:

* **predict, then run**: the learner records a prediction, a cell runs a job and shows what happened,
  the check compares the two and refuses a prediction recorded after the run was shown;
* **debug this**: a broken job is given; the learner hands over the fixed job, which the check judges by
  what it wrote to the broker;
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
import json
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

def _fixed_page_counts(facts: JobFacts) -> str | None:
    on_time, _ = _on_time_of(facts, "views", 2_000)
    return _same_windows(facts, tumbling(on_time, _ts, lambda r: r["page"], 10_000),
                         "Each window should hold the on-time views of its page whose ts is in it.")


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
        nudge="Look at the window starts of the broken job's result: what clock are they on?",
        concept="Without select_timestamp a record's data time is when the broker stored it, so the "
                "windows cut wall-clock time, not the time in the view. The event time is the view's 'ts'.",
        call='.select_timestamp(lambda e: e["ts"]) right after .source(...), before key_by; give the job a '
             "new id (and sink topic), run_until_idle()."),
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


def _slowest(facts: JobFacts) -> str | None:
    on_time, late = _on_time_of(facts, "views", 1_000)
    wrong = _same_windows(facts, tumbling(on_time, _ts, lambda r: f"server-{r['server']}", 5_000,
                                          value=lambda r: r["arrival"] - r["ts"], fold=max),
                          "Each window should hold the longest delay (arrival - ts) of the on-time views of its "
                          "server whose ts is in it.")
    if wrong:
        return wrong
    if len(facts.late) != len(late):
        return (f"The job found {len(facts.late)} late views; judged by their event time, {len(late)} "
                "are late.")
    return None


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
        nudge="The broken job finds no late view at all, with only 1 s of lateness. Why could nothing be "
              "out of order?",
        concept="Lateness is measured in event time, the 'ts' of each view. Stamped with its arrival time, "
                "the views are in order by construction, so nothing is ever late, and each window "
                "holds the views that arrived in it, not those that happened in it.",
        call='.select_timestamp(lambda v: v["ts"]) instead of v["arrival"]; a new job id, run_until_idle().'),
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


def _new_review_words(facts: JobFacts) -> str | None:
    return _same_counts(facts, _words(facts.broker, EX01_NEW_REVIEWS),
                        "The sink should hold, per word of the new reviews, how often it occurs.")


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
        nudge="Follow the review through the three steps of the job: split, shuffle, count.",
        concept="build() puts COMBINE before the shuffle sink (rstream's rewrite): it sends one record per "
                "distinct word of a batch and source queue, saying how many times the word came. The count "
                "still emits one update per word it stands for, as with RIP-58's plain shuffle.",
        call="Count the words of the review, and its distinct words: one of them is the shuffle, the other "
             "the sink. my_prediction = {\"shuffle\": ..., \"sink\": ...}"),
        explain="COMBINE merges the repeats of a word before the shuffle; the count emits an update per word.",
        same=_same_named("shuffle", "sink")),
    "Exercise 2": Exercise("debug", Hints(
        nudge="Look at the keys in the broken job's sink: what does it count?",
        concept="flat_map(fn) emits every item of fn(value). A str is itself iterable, one character at a "
                "time; str.split returns the words.",
        call="A copy of new_review_words with .flat_map(str.split) instead of .flat_map(lambda text: text); "
             'build the job with a new id ("new-words-fixed"), then run_until_idle(progress=False).'),
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

#: The broken job of Exercise 2 (by its id), and the bound of Exercise 3's interval join, in ms.
EX05_BROKEN, EX05_WITHIN = "paid-in-window-broken", 3_000


def _topic_records(broker: Any, topic: str) -> list[dict[str, Any]]:
    return [record for _queue, records in records_by_queue(broker, topic) for record in records]


def _joined(facts: JobFacts) -> list[tuple[Any, Any]]:
    """Every ``(key, value)`` a job's sinks wrote (``JsonSerializer(with_key=True)``), over all its sinks."""
    return [(doc["key"], doc["value"]) for records in facts.sinks.values() for doc in records
            if isinstance(doc, dict) and "key" in doc and "value" in doc]


def _no_result(facts: JobFacts) -> str:
    return (f"The job's sink topics {list(facts.sinks)} hold no result: sink the join with "
            "JsonSerializer(with_key=True).")


def _paid_in_window(facts: JobFacts) -> str | None:
    """Exercise 2: every order of ``shop-events`` once, ``paid`` when a payment of it is in its 10 s window."""
    events = _topic_records(facts.broker, "shop-events")
    payments = [e for e in events if e.get("type") == "payment"]
    expected = {o["order"]: any(p["order"] == o["order"] and p["ts"] // 10_000 == o["ts"] // 10_000
                                for p in payments)
                for o in events if o.get("type") == "order"}
    got = _joined(facts)
    if not got:
        return _no_result(facts)
    twice = sorted({k for k, _v in got if [key for key, _ in got].count(k) > 1}, key=str)
    if twice:
        return (f"Orders {twice} come out more than once: a left join in tumbling windows emits each order "
                "once, with its payment or without.")
    if not all(isinstance(v, dict) and "paid" in v for _k, v in got):
        return "Each result's value should be a dict with 'paid', as the broken job's apply makes it."
    answer = {k: bool(v["paid"]) for k, v in got}
    if answer == expected:
        return None
    return (f"{_difference(answer, expected)} An order is paid when a payment of it is in the same 10 s "
            "window; look at which records the join's two sides hold.")


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
        call="o1 (ordered at 5.8 s, paid at 10.3 s): [0 s, 10 s) holds only the order, [5 s, 15 s) both, so 1. "
             "o5 (25.8 s, paid at 28.1 s): [20 s, 30 s) and [25 s, 35 s) hold both, so 2. Do the same for the "
             "others; o3 has no payment."),
        explain="A sliding window join emits a pair once per window the two records share.",
        same=_same_times_out),
    "Exercise 2": Exercise("debug", Hints(
        nudge="Every order comes out paid, even o3, which was never paid. What does the payment side hold?",
        concept="Both sides come from one topic through a filter each. If both filters keep the same records, "
                "every order meets itself in its own window, so every order looks paid.",
        call='payment_side = events.filter(lambda e: e["type"] == "payment"); a new job id, '
             "run_until_idle(progress=False)."),
        reads="shop-events", judge=_judging(_paid_in_window),
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


def _review_words(facts: JobFacts) -> str | None:
    return _same_counts(facts, _words(facts.broker, EX00_REVIEWS),
                        "The sink should hold, per word of the reviews, how often it occurs.")


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
        nudge="Look at the keys in the broken job's counts: are they words?",
        concept="A job counts whatever reaches count(). Each review must first be split into its words "
                "(flat_map gives one record per word); only then key each word by itself.",
        call='Copy the job, add .flat_map(str.split) right after .source(...), and keep key_by(lambda word: '
             'word); give it a new id ("review-words-fixed"), then run_until_idle(progress=False).'),
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
EX04_BROKEN, EX04_ORDERS, EX04_MOVES = "unpaid-broken", "shop-orders", "moves"


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


def _unpaid_alerts(facts: JobFacts) -> str | None:
    """Exercise 2: one alert per order of ``shop-orders`` created and never paid, and no other."""
    events = _topic_records(facts.broker, EX04_ORDERS)
    paid = {e["order"] for e in events if e.get("type") == "paid"}
    expected = sorted({e["order"] for e in events if e.get("type") == "created"} - paid)
    keys = sorted(str(k) for k, _v in _keyed_values(facts))
    if keys == expected:
        if facts.state_keys:  # the watermark passed every timer: nothing needs to wait any more
            return (f"The alerts are right, but the job still keeps state for {list(facts.state_keys)}: once an "
                    "order's alert is out (or it is paid) nothing needs it, and state never cleared grows without "
                    "bound. Clear it in on_timer as well (ctx.state.clear()).")
        return None
    extra = sorted(set(keys) - set(expected))
    missing = sorted(set(expected) - set(keys))
    parts = [f"{len(keys)} alerts, {len(expected)} expected"]
    if extra:
        parts.append(f"alerts for orders that were paid: {extra}")
    if missing:
        parts.append(f"no alert for unpaid orders: {missing}")
    if len(set(keys)) < len(keys):
        parts.append("some orders alert more than once")
    return "; ".join(parts) + ". A paid order must raise no alert, an unpaid one exactly one."


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
        nudge="Go round by round: which customers does each round change?",
        concept="After each batch, the state topic gets one message per key the batch changed, with the key's "
                "value at the end of the batch (RIP-58's changelog). Compaction keeps the latest message "
                "per key and drops the others.",
        call="Round 1 changes ann and bob, so 2 messages, not 3. Do the same for rounds 2 and 3 and add up; "
             "after compaction, count the distinct customers. my_prediction = {\"messages\": ..., "
             "\"after_compaction\": ...}"),
        explain="A batch writes one state message per changed key, however many records changed it.",
        same=_same_named("messages", "after_compaction")),
    "Exercise 2": Exercise("debug", Hints(
        nudge="Look at the broken job's alerts: which orders alert that were paid?",
        concept="A payment clears the order's value, but its timer stays registered and still fires. "
                "on_timer must decide from the state whether the order is still unpaid.",
        call="In on_timer: if ctx.state.get() is not None: forward the alert, then ctx.state.clear(). "
             'A new job id ("unpaid-fixed"), run_until_idle(progress=False).'),
        reads=EX04_ORDERS, judge=_judging(_unpaid_alerts),
        refuse=_not_the_given(EX04_BROKEN)),
    "Exercise 3": Exercise("build", Hints(
        nudge="It is the store credit job of the top of the notebook, with one step added and another sink.",
        concept="sum emits the new balance after every record (RocketMQ Streams does the same). "
                "After to_rstream(), filter(fn) gets that balance as its value and keeps what fn accepts.",
        call='key_by(lambda m: m["user"]).sum(lambda m: m["amount"]).to_rstream()'
             '.filter(lambda balance: balance < 0).sink("overdrawn", JsonSerializer(with_key=True)); '
             'RocketMQStream(..., properties={"data_dir": str(DATA)}).run_until_idle(progress=False)'),
        reads=EX04_MOVES, judge=_judging(_overdrawn)),
})

_ALL["04"] = _EX04
# notebook 06 ------------------------------------------------------------------------------------------
# (its own section: the exercises of 06_scaling_and_failure, registered in _ALL at its end)

#: The source topic of notebook 06's jobs.
EX06_SOURCE = "reviews"


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


def cluster_cores(spark: Any) -> int:
    """How many cores the Spark application may use at once (``spark.cores.max`` on a LocalCluster)."""
    cores = spark.sparkContext.getConf().get("spark.cores.max")
    return int(cores) if cores else int(spark.sparkContext.defaultParallelism)


def _cluster_review_words(broker: Any) -> dict[str, int]:
    return _words(broker, EX06_SOURCE)


def _running_counts(broker: Any, topic: str) -> dict[str, list[int]]:
    """Per word, the counts a sink topic holds, in the order written (per queue, by offset); a body is
    ``word:n`` (``TextSerializer(with_key=True)``) or ``{"key": word, "value": n}``."""
    out: dict[str, list[int]] = {}
    for message in sorted(broker.read(topic), key=lambda m: (m.queue_id, m.offset)):
        text = message.body.decode(errors="replace")
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and "key" in doc and isinstance(doc.get("value"), int):
            word, n = str(doc["key"]), int(doc["value"])
        else:
            word, _, count = text.rpartition(":")
            if not count.strip().isdigit():
                raise _Off(f"The sink {topic!r} holds {text[:40]!r}: a count per word is expected.")
            n = int(count)
        out.setdefault(word, []).append(n)
    return out


#: Exercise 2: per lost executor that a check counted, the job and its last batch then. A loss counts for
#: one run of the job: a job that ran on after it needs another kill (checking again unchanged is fine).
_CREDITED: dict[str, tuple[str, int]] = {}


def _check_survived(exercise: str, job: Any, hints: Hints) -> Graded:
    """Exercise 2: an executor was lost while ``job`` ran (Spark's record, a loss after the notebook's own
    kill, not counted before for a job that has run since), the job committed a batch of new reviews
    after it and read them all, and its counts (state and sink) equal the words of the broker's
    ``reviews``, every running count 1, 2, ..., n once."""
    from .exercises import NOT_YET, RIGHT, WRONG

    def wrong(message: str) -> Graded:
        return Graded(exercise, WRONG, message, hints)

    if job is None or job is Ellipsis:
        return Graded(exercise, NOT_YET, "Put the job in the cell above, run it, then this one.", hints)
    if not all(hasattr(job, name) for name in ("topology", "broker", "history", "lag", "state", "spark")):
        return wrong(f"A job (a RocketMQStream that ran through a kill) is expected; your answer is of type "
                     f"{type(job).__name__}. Counts typed in or computed without the job say nothing about "
                     "what survived the kill.")
    history = job.history()
    if not history:
        return wrong(f"Job {job.job_id!r} has not run yet (no committed batch).")
    if EX06_SOURCE not in job.topology.source_topics:
        return wrong(f"Job {job.job_id!r} reads {list(job.topology.source_topics)}, not {EX06_SOURCE!r}.")
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
             and any(q.topic == EX06_SOURCE and q.records_in for q in b.queues)]
    if not before:
        return wrong(f"Job {job.job_id!r} committed no batch before {last.executor} was lost: the kill must "
                     "come while the job runs.")
    if not after:
        return wrong(f"Spark lost {last.executor}, but job {job.job_id!r} has read no review since: send a "
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
    expected = _cluster_review_words(job.broker)
    try:
        state = job.state()
        counts = {str(k): int(v) for k, v in zip(state["key"], state["value"])}
        running = {w: n for topic in job.topology.sink_topics
                   for w, n in _running_counts(job.broker, topic).items()}
    except _Off as off:
        return wrong(str(off))
    except Exception as exc:
        return wrong(f"Could not read the job's counts ({type(exc).__name__}: {exc}).")
    if counts != expected:
        return wrong(f"The job's state: {_difference(counts, expected)} Every word of 'reviews' should be "
                     "counted once, across the kill.")
    gaps = sorted(w for w, n in expected.items() if running.get(w) != list(range(1, n + 1)))
    if gaps:
        return wrong(f"The sink's running counts of {gaps[:3]} are not 1, 2, ..., n once each: something was "
                     "lost or written twice.")
    _CREDITED[last.executor] = (job.job_id, last_batch)
    executors = sorted({q.executor for b in after for q in b.queues})
    return Graded(exercise, RIGHT, f"Spark lost {last.executor}; job {job.job_id!r} then committed "
                  f"{len(after)} batch(es) of new reviews on {', '.join(executors)}, replaying "
                  f"{sum(b.replayed_keys for b in after)} keys, and every count is exact. Well done.")


def _one_per_core(job: Any) -> str | None:
    """Exercise 3's ``refuse``: as many shuffle queues as the cluster has cores, and (once it ran) every one
    of them carried words."""
    topics = dict(job.topology.shuffle_topics)
    cores = cluster_cores(job.spark)
    if len(topics) != 1:
        return f"The job has {len(topics)} shuffle topics; a word count has one (key_by, then count)."
    (topic, queues), = topics.items()
    if queues != cores:
        many = "more" if queues > cores else "fewer"
        return (f"The job's shuffle topic has {queues} queue(s), {many} than the cluster's {cores} cores: "
                "each queue is one counting task per batch. Give it as many queues as there are cores.")
    if job.history() and job.broker.has_topic(topic):
        idle = [q for q, end in enumerate(job.broker.end_offsets(topic)) if not end]
        if idle:
            return f"Shuffle queues {idle} of {topic!r} never carried a word: no task counted on them."
    return None


def _review_counts(facts: JobFacts) -> str | None:
    return _same_counts(facts, _cluster_review_words(facts.broker),
                        "The sink should hold, per word of 'reviews', how often it occurs.")


def _same_executor_count(predicted: Any, shown: dict[str, int]) -> bool:
    return (isinstance(predicted, int) and not isinstance(predicted, bool)
            and predicted == shown["most executors counting in one batch"])


class _Exercises06(Exercises):
    """Notebook 06's exercises: Exercise 2 is checked by ``_check_survived`` (a job through a kill, its
    sink written as text), the others as every notebook's."""

    def judge(self, exercise: str, answer: Any = None) -> Graded:
        spec = self.items[exercise]
        if spec.kind == "survive":
            return _check_survived(exercise, answer, spec.hints)
        return super().judge(exercise, answer)


_EX06 = _Exercises06("06", items={
    "Exercise 1": Exercise("predict", Hints(
        nudge="Count the tasks that count words in one batch. Which topic do they read, and how many "
              "queues does it have?",
        concept="The count reads the shuffle topic. One task per queue per batch, and one queue's task "
                "runs on one executor at a time. So the shuffle topic's queues cap how many executors "
                "count at once, whatever the cluster has.",
        call="shuffle_queues=1: one counting task per batch. my_prediction = the number of executors "
             "that one task can run on at once."),
        explain="The number of queues caps parallelism: a core with no queue to run has nothing to count.",
        same=_same_executor_count),
    "Exercise 2": Exercise("survive", Hints(
        nudge="Do what the 'Lose an executor' cell does, once more, then hand over the job.",
        concept="Spark keeps a record of the executors it lost. The check reads it: a loss after the "
                "notebook's first kill, while the job runs, and a round of reviews counted after it.",
        call='cluster.kill_executor(cluster.executors()[0]); broker.send_batch("reviews", '
             "reviews(9)); job.run_until_idle(progress=False); survivor = job")),
    "Exercise 3": Exercise("build", Hints(
        nudge="It is the word count of the notebook with another shuffle_queues and a JSON sink.",
        concept="Each shuffle queue is one counting task per batch, and a task uses one core. As many "
                "queues as cores lets every core count at once; the cluster's cores are in "
                "cluster.master_state()['cores'].",
        call='from rstream import JsonSerializer; StreamBuilder("per-core-count", '
             'shuffle_queues=cluster.master_state()["cores"]); '
             '.flat_map(str.split).key_by(lambda w: w).count().to_rstream().sink("per-core-counts", '
             'JsonSerializer(with_key=True)); RocketMQStream(..., properties={"data_dir": str(DATA / "job")})'
             ".run_until_idle(progress=False)"),
        reads=EX06_SOURCE, judge=_judging(_review_counts), refuse=_one_per_core),
})

_ALL["06"] = _EX06

# notebook 07 ------------------------------------------------------------------------------------------
# (its own section: the exercises of 07_rocketmq, registered in _ALL at its end)

#: The broken job of Exercise 2 (by its id), the notebook's own word count (by its id), and the topics
#: Exercises 2 and 3 read (on the RocketMQ broker).
EX07_BROKEN, EX07_NOTEBOOK_JOB, EX07_ORDERS, EX07_REVIEWS = (
    "order-counts-broken", "wordcount", "order-log", "reviews")


def _not_the_rocketmq_word_count(job: Any) -> str | None:
    """A ``refuse``: the word count that notebook 07 runs on RocketMQ is not an answer to an exercise."""
    if job.job_id == EX07_NOTEBOOK_JOB:
        return ("That is the notebook's word count (job 'wordcount'), not a new job: build your own, with a "
                "new id, and run it.")
    return None


def _orders_per_customer(facts: JobFacts) -> str | None:
    return _same_counts(facts, _first_words(facts.broker, EX07_ORDERS),
                        "The sink should hold, per customer (the first word of a line of 'order-log'), how "
                        "many orders they made.")


def _rocketmq_reviews_per_first_word(facts: JobFacts) -> str | None:
    return _same_counts(facts, _first_words(facts.broker, EX07_REVIEWS),
                        "The sink should hold, per first word, how many reviews of 'reviews' begin "
                        "with it.")


_EX07 = Exercises("07", items={
    "Exercise 1": Exercise("predict", Hints(
        nudge="Two questions: how many times does the job read the word 'mug', and what decides the queue "
              "of a sink message?",
        concept="The count writes one updated count per word it reads, a repeated word too (RocketMQ Streams' "
                "model). A sink sends a message with a key to the queue of a hash of that key, so all of one "
                "key's messages go to one queue, in order.",
        call="'mug' is read 4 times (1 + 1 + 2): 4 messages, each a new count, all in the queue of its hash. "
             "my_prediction = {\"mug_messages\": ..., \"queues_with_mug\": ...}"),
        explain="One updated count per word read; one queue per key, by a hash of the key.",
        same=_same_named("mug_messages", "queues_with_mug")),
    "Exercise 2": Exercise("debug", Hints(
        nudge="Read the broken job's sink as the downstream application does: what does one message hold?",
        concept="A sink's serializer decides the bytes of each message. TextSerializer(with_key=True) writes "
                "'ann:3', which is not JSON; JsonSerializer(with_key=True) writes {\"key\": ..., "
                "\"value\": ...}.",
        call="A copy of order_counts with .sink(..., JsonSerializer(with_key=True)); a new job id "
             '("order-counts-fixed") and a new sink topic, then run_until_idle(progress=False).'),
        reads=EX07_ORDERS, judge=_judging(_orders_per_customer),
        refuse=_refusing(_not_the_given(EX07_BROKEN), _not_the_rocketmq_word_count, _json_sink)),
    "Exercise 3": Exercise("build", Hints(
        nudge="It is the notebook's word count, with each review giving one word only and a JSON sink.",
        concept="map(fn) turns each review into one record, its first word; key it by itself and count. "
                "On RocketMQ, the job's shuffle, state and sink topics are created when it starts.",
        call='StreamBuilder("first-words"); .source("reviews", TextDeserializer()).map(lambda s: '
             's.split()[0]).key_by(lambda w: w).count().to_rstream().sink("first-word-counts", '
             'JsonSerializer(with_key=True)); RocketMQStream(..., broker=broker, spark=spark, properties='
             '{"data_dir": str(DATA / "job")}).run_until_idle(progress=False)'),
        reads=EX07_REVIEWS, judge=_judging(_rocketmq_reviews_per_first_word),
        refuse=_refusing(_not_the_rocketmq_word_count, _json_sink)),
})

_ALL["07"] = _EX07
