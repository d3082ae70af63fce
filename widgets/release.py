"""``release()``: the learner's last step in a workshop notebook. It stops Spark and its JVM, then asks the
Jupyter server that runs this kernel to shut the kernel down, so a learner going through the series in one
JupyterLab never keeps a finished notebook's memory (about 150 MB per open kernel, even with Spark gone).

A notebook's last cell shows ``release_button(...)``: *Restart Kernel and Run All* only draws the button,
so the kernel stays up for the exercises; the learner clicks it when done (the browser suite clicks it too).

The shutdown goes through the server (as *Kernel → Shut Down Kernel* does), so JupyterLab does not
restart the kernel; where no Jupyter server runs this kernel (a script, ``nbclient``), only Spark stops.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rstream import stop_spark

#: Seconds between the cell's end and the kernel's shutdown (the cell's output is shown first).
SHUTDOWN_AFTER_S = 1.0


class Released:
    """What ``release()`` did, shown as one line."""

    def __init__(self, message: str, kernel_stops: bool) -> None:
        self.message = message
        self.kernel_stops = kernel_stops

    def __repr__(self) -> str:
        return self.message

    def _repr_html_(self) -> str:
        return f'<div style="color:#2b8a3e;font-family:monospace;overflow-wrap:anywhere">{escape(self.message)}</div>'


def release(shutdown_kernel: bool = True) -> Released:
    """Stop Spark (``stop_spark()``), then shut this notebook's kernel down through its Jupyter server
    (``shutdown_kernel=False``: keep the kernel). Never raises: at worst it says what it could not do."""
    stop_spark()
    if not shutdown_kernel:
        return Released("Spark stopped; the kernel stays.", False)
    kernel_id = _kernel_id()
    server = _server_running(kernel_id) if kernel_id else None
    if server is None:
        return Released("Spark stopped (no Jupyter server runs this kernel, so it stays).", False)
    url, headers = server
    request = urllib.request.Request(f"{url}api/kernels/{kernel_id}", method="DELETE", headers=headers)
    timer = threading.Timer(SHUTDOWN_AFTER_S, _send, args=(request,))
    timer.daemon = True
    timer.start()
    return Released("Spark stopped, and this notebook's kernel shuts down now: its memory goes back. "
                    "Run the notebook again from the top to bring it back; open the next one to go on.", True)


class _Stoppable(Protocol):
    def stop(self) -> Any: ...


class ReleaseButton:
    """A button that stops ``stop`` (each with ``.stop()``, in order), then calls ``release()``: the
    deliberate end of a notebook. Drawing it does nothing else, so Run All leaves the kernel up.

    ``ReleaseButton.shown`` holds the last one drawn in this kernel; ``click()`` does what a click does
    (the headless notebook tests call it, where no one can click)."""

    shown: ClassVar[ReleaseButton | None] = None

    def __init__(self, stop: tuple[_Stoppable, ...] = (), release_fn: Callable[[], Released] | None = None) -> None:
        import ipywidgets as w

        self.stop = stop
        self.released: Released | None = None
        self._release = release_fn or release
        self.button = w.Button(description="Release: stop Spark and shut this kernel down", icon="power-off",
                               button_style="warning", layout=w.Layout(width="auto"))
        self.status = w.HTML("")
        self.widget = w.VBox([self.button, self.status])
        self.widget.add_class("rstream-release")
        self.button.on_click(lambda _b: self.click())
        ReleaseButton.shown = self

    def click(self) -> Released:
        """Stop what was given, then ``release()``; a second click only says it was done."""
        if self.released is not None:
            return self.released
        self.button.disabled = True
        self.status.value = "<i>stopping...</i>"
        failed = []
        for thing in self.stop:
            try:
                thing.stop()
            except Exception as exc:  # release anyway: the kernel's end stops what is left
                failed.append(f"<div>{escape(f'{type(thing).__name__}.stop() failed: {exc}')}</div>")
        self.released = self._release()
        self.button.description = "Released"
        self.status.value = "".join(failed) + self.released._repr_html_()
        return self.released

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


def release_button(*stop: _Stoppable) -> ReleaseButton:
    """The last cell of a workshop notebook: a button that stops each of ``stop`` (a job, a monitor, a
    cluster: anything with ``.stop()``), then calls ``release()``. Run All only draws it."""
    return ReleaseButton(stop)


def _send(request: urllib.request.Request) -> None:
    try:
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30)
    except Exception:  # the kernel is going away meanwhile; nothing is waiting for an answer
        pass


def _kernel_id() -> str | None:
    """This kernel's id, from its connection file (``kernel-<id>.json``); None outside a kernel."""
    try:
        from ipykernel.connect import get_connection_file

        name = Path(get_connection_file()).name
    except Exception:
        return None
    return name[len("kernel-"):-len(".json")] if name.startswith("kernel-") and name.endswith(".json") else None


def _server_running(kernel_id: str) -> tuple[str, dict[str, str]] | None:
    """``(url, headers)`` of the local Jupyter server that runs ``kernel_id`` (from the servers' runtime
    files), or None."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir

        files = sorted(Path(jupyter_runtime_dir()).glob("jpserver-*.json"))
    except Exception:
        return None
    hub_token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for path in files:
        try:
            info: dict[str, Any] = json.loads(path.read_text())
            token = info.get("token") or hub_token
            headers = {"Authorization": f"token {token}"} if token else {}
            url = str(info["url"])
            url = url if url.endswith("/") else url + "/"
            with opener.open(urllib.request.Request(f"{url}api/kernels", headers=headers), timeout=5) as answer:
                if any(k.get("id") == kernel_id for k in json.loads(answer.read())):
                    return url, headers
        except Exception:  # a stale runtime file, or a server that is not ours to ask
            continue
    return None
