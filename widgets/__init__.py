"""The notebook toolkit: ipywidgets views over rstream's plain objects.

    from widgets import JobMonitor, topology_view
    monitor = JobMonitor(job).start()   # live batches table; monitor.stop() when done

It imports rstream; rstream never imports it.
"""

from widgets.monitor import JobMonitor
from widgets.progress import ProgressSnapshot
from widgets.topology import topology_svg, topology_view

__all__ = ["JobMonitor", "ProgressSnapshot", "topology_svg", "topology_view"]
