"""The notebook toolkit: ipywidgets views over rstream's plain objects.

    from rstream.widgets import JobMonitor, WatermarkMonitor, LateDataTable, topology_view
    monitor = JobMonitor(job).start()        # live batches table; monitor.stop() when done
    watermarks = WatermarkMonitor(job).start()  # watermarks, and why each open window has not fired
    late = LateDataTable(job).start()        # the records that came too late, and why

Each widget is a view over a plain object (``ProgressSnapshot``, ``WatermarkSnapshot``,
``LateDataSnapshot``) with ``to_pandas()`` and ``_repr_html_``. It imports rstream; rstream never
imports it.
"""

from .late import LateDataSnapshot
from .late_table import LateDataTable
from .live import LiveView
from .monitor import JobMonitor
from .progress import ProgressSnapshot
from .topology import TopologyMonitor, TopologySnapshot, topology_svg, topology_view
from .watermark_monitor import WatermarkMonitor
from .watermarks import WatermarkSnapshot

__all__ = [
    "JobMonitor",
    "LateDataSnapshot",
    "LateDataTable",
    "LiveView",
    "ProgressSnapshot",
    "TopologyMonitor",
    "TopologySnapshot",
    "WatermarkMonitor",
    "WatermarkSnapshot",
    "topology_svg",
    "topology_view",
]
