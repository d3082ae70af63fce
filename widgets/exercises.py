"""Exercise checks for the workshop notebooks: ``check(...)`` says right, not yet, or what is off,
with a hint; it never raises, so a notebook always runs top to bottom, answered or not."""

from __future__ import annotations

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
