"""A new local session's warm-up (a small job ``get_spark`` runs in the background, see
``rstream.runtime.session``) as a thread that queries wait for: ``rstream.runtime.job_query``
waits here, so this module imports nothing of the job. No Spark here."""

from __future__ import annotations

import threading
from collections.abc import Callable

_WARM_UP: threading.Thread | None = None


def begin_warm_up(run: Callable[[], None]) -> None:
    """Run ``run`` (the session's warm-up) on a thread of its own; ``await_warm_up`` waits for it."""
    global _WARM_UP
    _WARM_UP = threading.Thread(target=run, name="rstream-warm-up", daemon=True)
    _WARM_UP.start()


#: How long the warm-up job may run, and a query waits for it (s): a cold start takes 6 s here (2 cores).
WARM_UP_TIMEOUT_S = 120.0


def await_warm_up(timeout: float = WARM_UP_TIMEOUT_S) -> None:
    """Wait until the session's warm-up (``rstream.runtime.session._start_warm_up``) has ended, if it
    runs. A query started in the meantime would find Spark as cold, and a new session's first two
    queries started at once can fail in Spark (a task that cannot be deserialized:
    ``java.io.OptionalDataException``, seen on this machine). Not from the warm-up's own thread."""
    warm_up = _WARM_UP
    if warm_up is not None and warm_up is not threading.current_thread():
        warm_up.join(timeout)


def warming_up() -> bool:
    """Whether the session's warm-up still runs: a query started now waits for it (``await_warm_up``)."""
    warm_up = _WARM_UP
    return warm_up is not None and warm_up.is_alive() and warm_up is not threading.current_thread()
