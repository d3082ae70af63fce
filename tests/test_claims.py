"""Every claim about whose a concept is stays pinned to a source: the README's "Whose is it" table names one
for every row, and a notebook text that credits RIP-58, RocketMQ Streams, Flink or Kafka Streams names the
version it means or links to that table. No Spark; it reads the repository's own files only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
TABLE_LINK = "../README.md#whose-is-it"

#: The names a sentence credits a design or a system with.
NAMES = {
    "RocketMQ Streams": re.compile(r"RocketMQ[\s-]+Streams"),
    "Flink": re.compile(r"\bFlink\b"),
    "Kafka Streams": re.compile(r"\bKafka\s+Streams\b"),
}
#: What pins each name in a sentence that does not link to the table: a RocketMQ Streams release (or the
#: design, RIP-58), a version number for the others.
VERSIONS = {
    "RocketMQ Streams": re.compile(r"RIP-58|1\.0\.1-preview|\b1\.1(\.[01])?\b|\bdevelop\b"),
    "Flink": re.compile(r"\b\d+\.\d+\b"),
    "Kafka Streams": re.compile(r"\b\d+\.\d+\b"),
}
#: Words of one release only, and the release a text that uses them must name (issue 49's list).
ONE_RELEASE = {
    "NewSplit": "1.0.1-preview",
    "RemoveSplit": "1.0.1-preview",
    "CheckPoint": "1.0.1-preview",
    "commitStateIntervalMillisecond": "develop",
    "idleTimeToFireWindow": "1.1.1",
}
#: Exercise instructions (owned by the exercises' authors, not edited with the rest) whose claims are not
#: pinned yet, each with what is wrong. The test fails when one is fixed or gone: then drop its entry.
PENDING: dict[tuple[str, str], str] = {}


def notebooks() -> list[Path]:
    """The learner notebooks (the solutions are written from them; checkpoints and outputs are not ours)."""
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def markdown_cells(path: Path) -> list[tuple[str, str]]:
    cells = json.loads(path.read_text())["cells"]
    return [(c.get("id", ""), "".join(c["source"])) for c in cells if c["cell_type"] == "markdown"]


def sentences(text: str) -> list[str]:
    """Sentences, roughly: a full stop, colon or semicolon followed by a space or a line end closes one."""
    text = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(".", "·"), text)  # no sentence ends in code
    return [s for s in re.split(r"(?<=[.;:!?])\s+|\n\s*\n|\n[*|-] ", text) if s.strip()]


def unpinned(text: str) -> list[str]:
    """What in a text names a design or system without pinning it: [] when the text links to the table."""
    if TABLE_LINK in text or "#whose-is-it" in text:
        return []
    found = []
    for sentence in sentences(text):
        for name, pattern in NAMES.items():
            if pattern.search(sentence) and not VERSIONS[name].search(sentence):
                found.append(f"{name}: {' '.join(sentence.split())[:140]}")
    return found


def wrong_release(text: str) -> list[str]:
    return [f"{word} without {release}" for word, release in ONE_RELEASE.items()
            if word in text and release not in text]


def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def table_rows(section: str) -> list[list[str]]:
    rows = [line for line in section.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]
    return [c for c in cells[2:]]  # past the header and its rule


def test_the_whose_is_it_table_names_whose_and_a_source_for_every_row() -> None:
    section = readme_section("Whose is it")
    rows = table_rows(section)
    assert len(rows) >= 30, "the table lost rows"
    origins = re.compile(r"RIP-58|1\.0\.1-preview|\b1\.1\.[01]\b|\b1\.1\b|\bdevelop\b|Flink|Kafka Streams|Spark|rstream")
    code_path = re.compile(r"`[^`]*(/|\.java|\.md|\.py)[^`]*`")
    bad = []
    for concept, whose, source, ours in rows:
        if not origins.search(whose):
            bad.append(f"{concept}: 'whose' names no origin")
        if not source or source in {"—", "-"}:
            bad.append(f"{concept}: no source")
        elif re.search(r"1\.0\.1-preview|\b1\.1\.[01]\b|\bdevelop\b", whose) and not re.search(r"\.java`|\.java\b", source):
            bad.append(f"{concept}: a RocketMQ Streams release without its source file")
        elif not (code_path.search(source) or re.search(r'"[^"]+"', source) or "*" in whose):
            bad.append(f"{concept}: the source names no file, document section or quotation")
        if not ours:
            bad.append(f"{concept}: says nothing of rstream")
    assert bad == []
    for tag in ("rocketmq-streams-1.0.1-preview", "rocketmq-streams-all-1.1.0", "rocketmq-streams-all-1.1.1", "22976de3"):
        assert tag in section, f"the table's legend must name {tag}"
    for concept in ("NewSplit", "skip_data_error", "idleTimeToFireWindow", "`flat_map` on a grouped stream",
                    "interval join", "a join without a window", "where the watermark is kept", "late record",
                    "when state and offsets are committed", "`WindowStream`"):
        assert concept in section, f"the table has no row on {concept} (issue 49)"
    assert wrong_release(section) == []


def test_every_notebook_text_that_credits_a_design_or_system_pins_it() -> None:
    unpinned_cells, wrong = {}, {}
    for path in notebooks():
        for cell_id, text in markdown_cells(path):
            if (path.name, cell_id) in PENDING:
                continue
            if found := unpinned(text):
                unpinned_cells[f"{path.name} {cell_id}"] = found
            if found := wrong_release(text):
                wrong[f"{path.name} {cell_id}"] = found
    assert unpinned_cells == {}, "name the version, or link to the table: " + TABLE_LINK
    assert wrong == {}


def test_the_pending_exercise_texts_are_still_there_and_still_unpinned() -> None:
    """An entry of ``PENDING`` whose cell was fixed or replaced must go (so the check covers that cell)."""
    stale = []
    for (name, cell_id), why in PENDING.items():
        cells = dict(markdown_cells(NOTEBOOKS / name))
        if cell_id not in cells:
            stale.append(f"{name} {cell_id}: gone")
        elif not unpinned(cells[cell_id]) and not wrong_release(cells[cell_id]):
            stale.append(f"{name} {cell_id}: fixed ({why})")
    assert stale == [], "drop these entries from PENDING"


def test_the_readme_credits_no_design_or_system_without_a_version_or_the_table() -> None:
    text = (ROOT / "README.md").read_text()
    paragraphs = re.split(r"\n\s*\n", text)
    found = [p[:100] for p in paragraphs if wrong_release(p)]
    assert found == []
    late = [p[:100] for p in paragraphs if re.search(r"RIP-58[^.]*\bdrop", p)]
    assert late == [], "RIP-58 only calls a record late data; it drops nothing"


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: p.name)
def test_each_notebook_links_to_the_table_and_the_link_resolves(path: Path) -> None:
    text = "\n".join(t for _, t in markdown_cells(path))
    assert TABLE_LINK in text, f"{path.name} credits designs and releases: link them to the table"
    readme = (ROOT / "README.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", readme, re.M)}
    for fragment in re.findall(r"\]\(\.\./README\.md#([^)\s]+)\)", text):
        assert fragment in anchors, f"{path.name}: README.md#{fragment} is no heading of the README"


def test_the_check_catches_what_issue_49_found() -> None:
    """The rules themselves, on sentences the series used to say."""
    assert unpinned("RocketMQ Streams has this `flatMap` on its `GroupedStream`.")
    assert unpinned("the same idea as Flink's `WatermarkStrategy.withIdleness`.")
    assert not unpinned("RocketMQ Streams 1.1.1 has `idleTimeToFireWindow`.")
    assert not unpinned(f"Flink's interval join ([the table]({TABLE_LINK})).")
    assert wrong_release("NewSplit: a queue arrived (RocketMQ Streams 1.1)")
    assert wrong_release("its WorkerThread commits on a timer (`commitStateIntervalMillisecond`, 2 s)")
    assert not wrong_release("on the develop branch, every `commitStateIntervalMillisecond`")
