"""The notebook toolkit: ipywidgets views over rstream's plain objects, imported as ``rstream.widgets``.

    from rstream.widgets import (JobMonitor, TopologyMonitor, WatermarkMonitor, LateDataTable, ErrorTable,
                                 EventTimeChart, StateInspector, TopicBrowser, ProducerPanel)
    monitor = JobMonitor(job).start()           # live batches table; monitor.stop() when done
    watermarks = WatermarkMonitor(job).start()  # watermarks, and why each open window has not fired
    chart = EventTimeChart(job).start()         # event time against processing time, live
    StateInspector(job)                         # state at any batch, what a batch changed, replay
    TopicBrowser(broker, job)                   # every topic decoded; click a record to trace it

Each widget is a view over a plain object with ``to_pandas()`` and ``_repr_html_`` (``ProgressSnapshot``,
``WatermarkSnapshot``, ``LateDataSnapshot``, ``ErrorSnapshot``, ``EventTimeSnapshot``, ``StateSnapshot``,
``StateDiffSnapshot``, ``TopicPage``, ``TopicOffsets``, ``RateProducer``) that works without a front end.
Live views redraw from one renderer thread each (``start()`` / ``stop()``). The toolkit imports rstream;
rstream never imports it.
"""

from .errors import ErrorSnapshot, ErrorTable
from .eventtime import EventTimeChart, EventTimeSnapshot
from .exercises import CheckResult, RunFacts, check, run_facts
from .late import LateDataSnapshot
from .late_table import LateDataTable
from .live import LiveView
from .monitor import JobMonitor
from .producer import ProducerPanel, RateProducer
from .progress import ProgressSnapshot
from .release import Released, release
from .state import StateDiffSnapshot, StateInspector, StateSnapshot
from .topics import TopicBrowser, TopicOffsets, TopicPage
from .topology import TopologyMonitor, TopologySnapshot, topology_svg, topology_view
from .watermark_monitor import WatermarkMonitor
from .watermarks import WatermarkSnapshot

__all__ = [
    "CheckResult",
    "ErrorSnapshot",
    "ErrorTable",
    "EventTimeChart",
    "EventTimeSnapshot",
    "JobMonitor",
    "LateDataSnapshot",
    "LateDataTable",
    "LiveView",
    "ProducerPanel",
    "ProgressSnapshot",
    "RateProducer",
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
    "check",
    "release",
    "run_facts",
    "topology_svg",
    "topology_view",
]
