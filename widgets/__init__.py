"""The notebook toolkit: ipywidgets views over rstream's plain objects, imported as ``rstream.widgets``.

    from rstream.widgets import (JobMonitor, TopologyMonitor, WatermarkMonitor, LateDataTable, ErrorTable,
                                 EventTimeChart, StateInspector, TopicBrowser, ProducerPanel)
    monitor = JobMonitor(job).start()           # live batches table; monitor.stop() when done
    watermarks = WatermarkMonitor(job).start()  # watermarks, and why each open window has not fired
    chart = EventTimeChart(job).start()         # event time against processing time, live
    StateInspector(job)                         # state at any batch, what a batch changed, replay
    TopicBrowser(broker, job)                   # every topic decoded; click a record to trace it
    ExplainView(job, "counts", 0, 7)           # why a sink record is what it is; trace its inputs
    WhatIfView(job, allowed_lateness_ms=500)   # the same input with another setting, side by side

Each widget is a view over a plain object with ``to_pandas()`` and ``_repr_html_`` (``ProgressSnapshot``,
``WatermarkSnapshot``, ``LateDataSnapshot``, ``ErrorSnapshot``, ``EventTimeSnapshot``, ``StateSnapshot``,
``StateDiffSnapshot``, ``TopicPage``, ``TopicOffsets``, ``RateProducer``; ``Explanation`` and ``WhatIf`` of
``job.explain`` and ``job.what_if``) that works without a front end.
Live views redraw from one renderer thread each (``start()`` / ``stop()``). The toolkit imports rstream;
rstream never imports it.
"""

from typing import TYPE_CHECKING

from rstream.lazy import lazy_getattr

# Eager: the module and its function share the name ``release``, and the function must win.
from .release import ReleaseButton, Released, release, release_button

#: Each name's module, loaded on first use: ``import rstream.widgets`` (or one of its modules) loads
#: neither pyspark nor the other views, so a view's plain object is usable where Spark is not installed.
_LAZY = {
    **dict.fromkeys(["ErrorSnapshot", "ErrorTable"], f"{__name__}.errors"),
    **dict.fromkeys(["EventTimeChart", "EventTimeSnapshot"], f"{__name__}.eventtime"),
    **dict.fromkeys(["ExplainView"], f"{__name__}.explain"),
    **dict.fromkeys(["CheckResult", "RunFacts", "check", "run_facts"], f"{__name__}.exercises"),
    **dict.fromkeys(["LateDataSnapshot"], f"{__name__}.late"),
    **dict.fromkeys(["LateDataTable"], f"{__name__}.late_table"),
    **dict.fromkeys(["LiveView"], f"{__name__}.live"),
    **dict.fromkeys(["JobMonitor"], f"{__name__}.monitor"),
    **dict.fromkeys(["ProducerPanel", "RateProducer"], f"{__name__}.producer"),
    **dict.fromkeys(["ProgressSnapshot"], f"{__name__}.progress"),
    **dict.fromkeys(["StateDiffSnapshot", "StateInspector", "StateSnapshot"], f"{__name__}.state"),
    **dict.fromkeys(["TopicBrowser", "TopicOffsets", "TopicPage"], f"{__name__}.topics"),
    **dict.fromkeys(["TopologyMonitor", "TopologySnapshot", "topology_svg", "topology_view"], f"{__name__}.topology"),
    **dict.fromkeys(["WatermarkMonitor"], f"{__name__}.watermark_monitor"),
    **dict.fromkeys(["WatermarkSnapshot"], f"{__name__}.watermarks"),
    **dict.fromkeys(["WhatIfView"], f"{__name__}.what_if"),
}
__getattr__ = lazy_getattr(__name__, _LAZY, globals())

if TYPE_CHECKING:
    from .errors import ErrorSnapshot, ErrorTable
    from .eventtime import EventTimeChart, EventTimeSnapshot
    from .exercises import CheckResult, RunFacts, check, run_facts
    from .explain import ExplainView
    from .late import LateDataSnapshot
    from .late_table import LateDataTable
    from .live import LiveView
    from .monitor import JobMonitor
    from .producer import ProducerPanel, RateProducer
    from .progress import ProgressSnapshot
    from .state import StateDiffSnapshot, StateInspector, StateSnapshot
    from .topics import TopicBrowser, TopicOffsets, TopicPage
    from .topology import TopologyMonitor, TopologySnapshot, topology_svg, topology_view
    from .watermark_monitor import WatermarkMonitor
    from .watermarks import WatermarkSnapshot
    from .what_if import WhatIfView


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CheckResult",
    "ErrorSnapshot",
    "ErrorTable",
    "EventTimeChart",
    "EventTimeSnapshot",
    "ExplainView",
    "JobMonitor",
    "LateDataSnapshot",
    "LateDataTable",
    "LiveView",
    "ProducerPanel",
    "ProgressSnapshot",
    "RateProducer",
    "ReleaseButton",
    "Released",
    "RunFacts",
    "StateDiffSnapshot",
    "StateInspector",
    "StateSnapshot",
    "TopicBrowser",
    "TopicOffsets",
    "TopicPage",
    "TopologyMonitor",
    "TopologySnapshot",
    "WatermarkMonitor",
    "WatermarkSnapshot",
    "WhatIfView",
    "check",
    "release",
    "release_button",
    "run_facts",
    "topology_svg",
    "topology_view",
]
