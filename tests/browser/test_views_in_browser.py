"""``job.explain`` and ``job.what_if`` as a learner sees them: a small notebook, generated in a temporary
folder (never in ``notebooks/``), run in a real JupyterLab in a real Chromium. It runs a tiny windowed
count on Spark, then shows the explanation of one of its results and a what-if run with a stricter
lateness, each as the plain object a cell displays and as its view (``ExplainView``, ``WhatIfView``).

Every cell must run clean (no error output, no stderr box, no widget error, nothing wider than the
notebook), each view must be drawn (the explanation's table and topology, the what-if run's two
pictures and its table), and the views' tables must show whole in the 1280 px window and whole or
in a box that scrolls in the 900 px one. Screenshots go to ``$RSTREAM_BROWSER_ARTIFACTS`` (else a
temporary folder whose path is printed), under ``explain_what_if/``: ``cell-NN.png`` per cell and
``cell-NN-narrow.png`` per view in the narrow window.

    .venv/bin/python -m pytest tests/browser/test_views_in_browser.py -q -s
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import require_browser
from tools.browser import (
    JupyterLab,
    run_notebook,
)

require_browser()

NOTEBOOK = "explain_what_if.ipynb"
#: The views whose tables are measured (``run_notebook(fit_tables=...)``): both plain objects' outputs
#: and both widgets.
VIEWS = ":is(.rstream-explain, .rstream-what-if, .rstream-view-explain, .rstream-view-what-if)"

CELLS = [
    ("setup", '''\
import json
import random
import shutil
from pathlib import Path

from rstream import (EmbeddedBroker, JsonDeserializer, JsonSerializer, RocketMQStream, StreamBuilder, Time,
                     TumblingWindow, get_spark)
from rstream.widgets import ExplainView, WhatIfView

DATA = Path("rstream-data/explain_what_if")
shutil.rmtree(DATA, ignore_errors=True)
spark = get_spark(tmp_dir="rstream-data/spark-tmp")
broker = EmbeddedBroker(DATA / "broker")
broker.create_topic("views", queues=2)
rng = random.Random(50)
T0 = 1_700_000_000_000
views = [{"page": f"page-{rng.randrange(3)}", "ts": T0 + i * 400 - rng.randrange(2500)} for i in range(120)]
for q in range(2):
    broker.send_batch("views", [json.dumps(v) for v in views[q::2]], queue=q)

builder = StreamBuilder("views-per-page", shuffle_queues=2)
(builder.source("views", JsonDeserializer()).select_timestamp(lambda v: v["ts"]).key_by(lambda v: v["page"])
 .window(TumblingWindow(Time.seconds(5))).count().to_rstream().sink("counts", JsonSerializer(with_key=True)))
job = RocketMQStream(builder.build(), broker=broker, spark=spark, properties={
    "data_dir": str(DATA), "allowed_lateness_ms": 2000, "max_records_per_queue": 15})
job.run_until_idle(progress=False)
counts = broker.read("counts")
len(counts)'''),
    ("explain", '''\
busiest = max(counts, key=lambda m: json.loads(m.body)["value"])
job.explain("counts", busiest.queue_id, busiest.offset)'''),
    ("explain view", "ExplainView(job, \"counts\", busiest.queue_id, busiest.offset)"),
    ("explain stages", '''\
# two stages: views per page, then the largest of those counts so far, for odd and even counts
stages = StreamBuilder("largest-count", shuffle_queues=2)
(stages.source("views", JsonDeserializer()).key_by(lambda v: v["page"]).count().to_rstream()
 .key_by(lambda n: n % 2).reduce(max).to_rstream().sink("per-count", JsonSerializer(with_key=True)))
staged = RocketMQStream(stages.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})
staged.run_until_idle(progress=False)
last = broker.read("per-count")[-1]
staged.explain("per-count", last.queue_id, last.offset)'''),
    ("what if", "job.what_if(allowed_lateness_ms=300)"),
    ("what-if view", "WhatIfView(job, allowed_lateness_ms=300)"),
    ("stop", "job.stop()\nspark.stop()"),
]


@pytest.fixture(scope="module")
def lab() -> Iterator[JupyterLab]:
    import nbformat

    folder = Path(tempfile.mkdtemp(prefix="rstream-views-"))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for _kind, src in CELLS]
    nbformat.write(nb, folder / NOTEBOOK)
    server = JupyterLab(notebooks=folder).start()
    yield server
    killed = server.stop()
    assert not killed, "processes of the JupyterLab server outlived it (killed):\n" + "\n".join(killed)


@pytest.mark.timeout(900)
def test_explain_and_what_if_render_clean_and_within_the_notebooks_width(lab: JupyterLab, page: Any,
                                                                          artifacts: Path) -> None:
    run = run_notebook(page, NOTEBOOK, lab, artifacts=artifacts, fit_tables=VIEWS, shutdown_kernel=False)
    try:
        cell = {kind: i for i, (kind, _src) in enumerate(CELLS)}
        drawn = page.evaluate("""(cells) => {
            const at = (i) => document.querySelector(`[data-rstream-cell="${i}"]`);
            const count = (i, selector) => at(i) ? at(i).querySelectorAll(selector).length : -1;
            const text = (i) => at(i) ? at(i).innerText : "";
            return {
                explain: [count(cells.explain, ".rstream-explain table tr"), count(cells.explain, ".rstream-explain svg")],
                explainView: [count(cells["explain view"], ".rstream-view-explain table tr"),
                              count(cells["explain view"], ".rstream-view-explain svg"),
                              count(cells["explain view"], ".rstream-view-explain select option")],
                whatIf: [count(cells["what if"], ".rstream-what-if img"), count(cells["what if"], ".rstream-what-if table tr")],
                whatIfView: [count(cells["what-if view"], ".rstream-view-what-if img"),
                             count(cells["what-if view"], ".rstream-view-what-if table tr"),
                             count(cells["what-if view"], ".rstream-view-what-if select")],
                stages: [count(cells["explain stages"], ".rstream-explain details"),
                         count(cells["explain stages"], ".rstream-explain details table tr")],
                texts: [text(cells.explain), text(cells["what if"]), text(cells["explain stages"])],
                broken: [...document.querySelectorAll(`[data-rstream-cell] img`)].filter(
                    (img) => !img.complete || img.naturalWidth === 0).length,
            };
        }""", cell)
    finally:
        leftovers = lab.shutdown_kernel(NOTEBOOK)
    print(f"\nscreenshots: {run.artifacts}\n{run.report()}\n{drawn}")
    assert run.passed, run.report()
    assert not leftovers, leftovers
    # each view drawn: the explanation's rows and its topology, the what-if run's two pictures and its rows
    assert drawn["explain"][0] > 2 and drawn["explain"][1] == 1, drawn
    assert drawn["explainView"][0] > 2 and drawn["explainView"][1] == 1 and drawn["explainView"][2] > 1, drawn
    assert drawn["whatIf"][0] == 2 and drawn["whatIf"][1] > 2, drawn
    assert drawn["whatIfView"][0] == 2 and drawn["whatIfView"][1] > 2 and drawn["whatIfView"][2] == 1, drawn
    assert drawn["broken"] == 0, drawn
    assert "window" in drawn["texts"][0] and "became late" in drawn["texts"][1], drawn["texts"]
    # a result two shuffles away: each input of the second stage folded under the table, with its own rows
    assert drawn["stages"][0] >= 1 and drawn["stages"][1] > 1, drawn
    assert "of the stage before, from" in drawn["texts"][2] and "came from" in drawn["texts"][2], drawn["texts"]
    # the views' tables measured in both windows (a view that lost its class would pass unmeasured)
    assert {(t["window"], t["cell"]) for t in run.tables} >= {
        (w, cell[c]) for w in ("normal", "narrow")
        for c in ("explain", "explain view", "explain stages", "what if", "what-if view")}, run.tables
