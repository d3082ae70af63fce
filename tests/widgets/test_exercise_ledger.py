"""The graded exercises' hints and ledger without Spark: no hint before it is earned (none in a check's
HTML or text, not even collapsed), one level per judged attempt or ``hint()``, and a ledger on disk that a
kernel restart (a new process over the same data folder) keeps, refusing a prediction made after the
run was shown, until an explicit reset.

The exercises here are made up (``made_up``), so that these tests hold whatever the notebooks' exercises
become; the last test reads every notebook's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker
from rstream.widgets.exercises import NOT_YET, RIGHT, WRONG, Hints, JobFacts
from rstream.widgets.graded import Exercise, Exercises, exercises_of
from rstream.widgets.ledger import Ledger
from tests.support.graded import StandIn, written

pytestmark = pytest.mark.unit

HINTS = Hints(nudge="NUDGE look at the keys", concept="CONCEPT a count per key", call="CALL key_by(w).count()")
LOCKED = ("NUDGE", "CONCEPT", "CALL")


def _counts(facts: JobFacts) -> str | None:
    got = {doc["key"]: doc["value"] for docs in facts.sinks.values() for doc in docs}
    return None if got == {"ann": 2, "bob": 1} else f"Your counts are {got}."


def made_up(data_dir: Path) -> Exercises:
    """A notebook "zz" with a predict exercise (``Exercise 1``) and a build one (``Exercise 2``)."""
    return Exercises("zz", items={
        "Exercise 1": Exercise("predict", HINTS),
        "Exercise 2": Exercise("build", HINTS, reads="orders", judge=_counts),
    }, data_dir=str(data_dir))


def shown(result: Any) -> str:
    """Everything a check's output holds: its HTML and its text form."""
    return result._repr_html_() + "\n" + repr(result)


def levels_in(result: Any) -> list[str]:
    text = shown(result)
    return [level for level in LOCKED if level in text]


@pytest.fixture
def broker(tmp_path: Path) -> EmbeddedBroker:
    b = EmbeddedBroker(tmp_path / "broker")
    b.create_topic("orders", queues=1)
    b.send_batch("orders", ["ann", "bob", "ann"], progress=False)
    return b


def job(broker: EmbeddedBroker, job_id: str, pairs: list[tuple[str, int]]) -> StandIn:
    return StandIn(broker, job_id, "orders", [written(broker, f"{job_id}-out", pairs)])


def test_an_unanswered_check_shows_no_hint_not_even_collapsed(tmp_path: Path) -> None:
    ex = made_up(tmp_path)
    for exercise in ("Exercise 1", "Exercise 2"):
        found = ex.check(exercise)
        assert found.verdict == NOT_YET
        assert levels_in(found) == [] and "data-rstream-hint=" not in shown(found) and "<details" not in shown(found)
        assert "hint" in shown(found).lower()  # it says how the hints open, and nothing of them
    assert levels_in(ex.hint("Exercise 2")) == []  # asking before a first attempt opens nothing
    assert levels_in(ex.hint("Exercise 1")) == []
    assert not Ledger.of("zz", tmp_path).path.exists() or all(
        e["event"] != "hint" for e in Ledger.of("zz", tmp_path).events("Exercise 2"))
    printed = repr(ex.items["Exercise 2"])  # printing the exercise itself shows no level either
    assert not any(level in printed for level in LOCKED)


def test_each_judged_attempt_opens_one_more_level_and_the_html_holds_only_those(
        tmp_path: Path, broker: EmbeddedBroker) -> None:
    ex = made_up(tmp_path)
    typed_in = ex.check("Exercise 2", {"ann": 2, "bob": 1})
    assert typed_in.verdict == WRONG and levels_in(typed_in) == ["NUDGE"]
    assert levels_in(ex.check("Exercise 2", 3)) == ["NUDGE"]  # another value typed in: no new attempt
    first = job(broker, "first", [("ann", 1)])
    assert levels_in(ex.check("Exercise 2", first)) == ["NUDGE", "CONCEPT"]
    assert levels_in(ex.check("Exercise 2", first)) == ["NUDGE", "CONCEPT"]  # the same job again: no new attempt
    html = ex.check("Exercise 2", first)._repr_html_()
    assert 'data-rstream-hint="2" open' in html and 'data-rstream-hint="1" open' not in html  # the newest open
    assert 'data-rstream-hint="3"' not in html and "Hint 3 of 3 opens with your next attempt" in html
    opened = ex.hint("Exercise 2")  # stuck: one more level without another attempt
    assert levels_in(opened) == ["NUDGE", "CONCEPT", "CALL"]
    assert levels_in(ex.check("Exercise 2", first)) == ["NUDGE", "CONCEPT", "CALL"]
    right = ex.check("Exercise 2", job(broker, "right", [("ann", 1), ("bob", 1), ("ann", 2)]))
    assert right.verdict == RIGHT and levels_in(right) == []  # a right answer needs no hint
    kinds = [e["event"] for e in ex.ledger.events("Exercise 2")]
    assert kinds == ["attempt", "attempt", "hint", "attempt"]


def test_a_prediction_opens_the_first_level_and_the_next_wait_for_the_run(tmp_path: Path) -> None:
    ex = made_up(tmp_path)
    ex.predict("Exercise 1", 3)
    waiting = ex.check("Exercise 1")
    assert waiting.verdict == NOT_YET and levels_in(waiting) == ["NUDGE"]
    assert levels_in(ex.hint("Exercise 1")) == []  # before the run: the next level would give it away
    ex.predict("Exercise 1", 4)  # a changed mind before the run: still one level
    assert levels_in(ex.check("Exercise 1")) == ["NUDGE"]
    ex.reveal("Exercise 1", lambda: 5)
    judged = ex.check("Exercise 1")
    assert judged.verdict == WRONG and levels_in(judged) == ["NUDGE", "CONCEPT"]
    assert levels_in(ex.hint("Exercise 1")) == ["NUDGE", "CONCEPT", "CALL"]


#: What a second kernel runs, over the same data folder: the made-up notebook again, as a restart sees it.
RESTARTED = textwrap.dedent("""
    import ast, json, sys
    from rstream.widgets.exercises import Hints
    from rstream.widgets.graded import Exercise, Exercises
    hints = Hints(nudge="NUDGE look at the keys", concept="CONCEPT a count per key", call="CALL key_by(w).count()")
    ex = Exercises("zz", items={"Exercise 1": Exercise("predict", hints)}, data_dir=sys.argv[1])
    out = {}
    for step in sys.argv[2:]:
        kind, _, value = step.partition("=")
        if kind == "predict":
            out[step] = repr(ex.predict("Exercise 1", ast.literal_eval(value)))
        elif kind == "reveal":
            out[step] = repr(ex.reveal("Exercise 1", lambda: ast.literal_eval(value)))
        elif kind == "check":
            found = ex.check("Exercise 1")
            out[step] = [found.verdict, found.message, found._repr_html_()]
    print(json.dumps(out))
""")


def restarted(data_dir: Path, *steps: str) -> dict[str, Any]:
    """Run ``steps`` (``predict=<literal>``, ``reveal=<literal>``, ``check``) in a new Python process: a kernel
    restarted, with nothing of this one's memory."""
    done = subprocess.run([sys.executable, "-c", RESTARTED, str(data_dir), *steps], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_ledger_survives_a_restart_and_a_prediction_after_the_run_stays_refused(tmp_path: Path) -> None:
    ex = made_up(tmp_path)
    ex.predict("Exercise 1", 3)
    ex.reveal("Exercise 1", lambda: 5)
    assert ex.check("Exercise 1").verdict == WRONG
    after = restarted(tmp_path, "predict=5", "check")
    assert "does not count" in after["predict=5"]
    verdict, message, html = after["check"]
    assert verdict == WRONG and "after the run was shown" in message
    for dodge in ("restart", "Restart", "kernel", "reset", "delete"):  # the rule, not how to get round it
        assert dodge not in message
    assert "NUDGE" in html and "CONCEPT" in html  # the hints opened before the restart are still open
    # in this process (its own memory unchanged), the ledger on disk decides too
    assert ex.check("Exercise 1").verdict == WRONG
    assert [e["event"] for e in ex.ledger.events("Exercise 1")][:3] == ["prediction", "reveal", "attempt"]


def test_running_the_notebook_again_with_the_prediction_that_stands_keeps_its_place(tmp_path: Path) -> None:
    """A learner's second Run All, after a restart: the prediction cell (unchanged) records nothing new,
    the run shows again, and the check says what it said; an emptied cell does not undo the prediction."""
    ex = made_up(tmp_path)
    prediction = {"shuffle": 5, "pairs": [(0, 10)]}
    ex.predict("Exercise 1", prediction)
    ex.reveal("Exercise 1", lambda: prediction)
    assert ex.check("Exercise 1").verdict == RIGHT
    events = ex.ledger.events("Exercise 1")
    again = restarted(tmp_path, f"predict={prediction!r}", f"reveal={prediction!r}", "check")
    assert "before the run was shown" in again[f"predict={prediction!r}"]
    assert again["check"][0] == RIGHT
    assert ex.ledger.events("Exercise 1") == events  # nothing new: the same prediction, run and answer
    assert "stands" in repr(ex.predict("Exercise 1", None))
    assert ex.check("Exercise 1").verdict == RIGHT
    changed = restarted(tmp_path, "predict={'shuffle': 5, 'pairs': [[0, 10]]}", "check")  # edited after the run
    assert "does not count" in changed["predict={'shuffle': 5, 'pairs': [[0, 10]]}"]
    assert changed["check"][0] == WRONG


def test_a_reset_starts_an_exercise_over_and_is_recorded_as_such(tmp_path: Path) -> None:
    ex = made_up(tmp_path)
    ex.predict("Exercise 1", 3)
    ex.reveal("Exercise 1", lambda: 5)
    ex.predict("Exercise 1", 5)
    assert ex.check("Exercise 1").verdict == WRONG
    note = ex.reset("Exercise 1")
    assert "started over" in repr(note)
    fresh = ex.check("Exercise 1")
    assert fresh.verdict == NOT_YET and levels_in(fresh) == []  # hints start over too
    assert "waits for your prediction" in repr(ex.reveal("Exercise 1", lambda: 5))
    ex.predict("Exercise 1", 5)
    ex.reveal("Exercise 1", lambda: 5)
    right = ex.check("Exercise 1")
    assert right.verdict == RIGHT and "reset" in right.message  # honest about it
    events = ex.ledger.events("Exercise 1")
    assert [e["event"] for e in events].count("reset") == 1
    assert [e["value"] for e in events if e["event"] == "prediction"] == ["3", "5", "5"]  # nothing erased
    with pytest.raises(KeyError):
        ex.reset("Exercise 9")


def test_the_ledger_is_one_json_file_per_notebook_written_whole(tmp_path: Path) -> None:
    ex = made_up(tmp_path)
    ex.predict("Exercise 1", 3)
    ex.check("Exercise 2", 7)
    path = tmp_path / "exercises" / "zz.json"
    assert ex.ledger.path == path
    doc = json.loads(path.read_text())
    assert doc["notebook"] == "zz" and set(doc["exercises"]) == {"Exercise 1", "Exercise 2"}
    assert [e["n"] for e in doc["exercises"]["Exercise 1"] + doc["exercises"]["Exercise 2"]] == [1, 2]
    assert sorted(p.name for p in path.parent.iterdir()) == ["zz.json"]  # no temporary file left
    path.write_text("{ not json")  # edited by hand: kept aside, and a new ledger begins
    assert ex.check("Exercise 1").verdict == NOT_YET
    assert any(p.name.startswith("zz.unreadable-") for p in path.parent.iterdir())


def test_every_notebook_s_unanswered_checks_show_no_hint_text() -> None:
    for notebook in ("00", "01", "02", "03", "04", "05", "06", "07"):
        ex = exercises_of(notebook)
        for name, spec in ex.items.items():
            text = shown(ex.check(name))
            levels = (spec.hints.nudge, spec.hints.concept, spec.hints.call)
            assert not any(level in text for level in levels), f"{notebook} {name}: a hint shows unanswered"
            assert "data-rstream-hint=" not in text
