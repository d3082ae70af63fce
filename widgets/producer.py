"""``ProducerPanel``: send records to a topic from a notebook, typed in or made by a generator at a
chosen rate, and watch the topic's end offsets move. ``RateProducer`` is the plain object under the
generator part; it works without a front end."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

import ipywidgets

from rstream import Broker

from .html import ALERT, box, counted, note, row, select, status, table
from .live import LiveView

#: How often a running producer sends what is due (seconds).
TICK_S = 0.1


def as_body(record: Any) -> bytes:
    """A record as a message body: bytes as they are, str as utf-8, anything else as JSON."""
    if isinstance(record, bytes):
        return record
    if isinstance(record, str):
        return record.encode()
    return json.dumps(record, default=str).encode()


def parse_lines(text: str, fmt: str) -> list[bytes]:
    """The records typed into the panel, one per non-empty line; ``fmt`` ``"JSON"`` checks each line
    is a JSON document (raises ``ValueError`` naming the line) and sends it compact."""
    bodies = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if fmt == "JSON":
            try:
                bodies.append(json.dumps(json.loads(line), separators=(",", ":")).encode())
            except ValueError as exc:
                raise ValueError(f"line {number} is not JSON ({exc.args[0]}): {line!r}") from None
        else:
            bodies.append(line.encode())
    return bodies


class RateProducer:
    """Sends ``make(i)`` for i = 0, 1, 2, ... (or the items of an iterable) to ``topic`` at ``rate``
    records per second, in small batches, until ``count`` were sent or ``stop()``; ``rate`` may be
    changed while it runs. A record is bytes, str, or anything JSON can write. ``error`` holds what
    stopped it, if something did (the generator raised, or the broker refused)."""

    def __init__(self, broker: Broker, topic: str, make: Callable[[int], Any] | Iterable[Any], rate: float = 10.0,
                 count: int | None = None, queue: int | None = None, first: int = 0) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive records per second, got {rate!r}")
        broker.topic(topic)  # raises UnknownTopicError with a hint
        self.broker, self.topic, self.rate, self.count, self.queue = broker, topic, float(rate), count, queue
        self._items: Iterator[Any] = map(make, itertools.count(first)) if callable(make) else iter(make)
        self.sent = 0
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> RateProducer:
        """Start sending in a background thread; returns at once."""
        if not self.running:
            self._stopping.clear()
            self._thread = threading.Thread(target=self._run, name=f"rstream-producer-{self.topic}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop sending (what was sent stays sent)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until ``count`` records were sent (or it stopped); returns whether it finished."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def _run(self) -> None:
        began, sent_then = time.monotonic(), self.sent
        rate = self.rate
        while not self._stopping.is_set():
            if rate != self.rate:  # a new rate counts from now
                began, sent_then, rate = time.monotonic(), self.sent, self.rate
            due = int((time.monotonic() - began) * rate) - (self.sent - sent_then)
            if self.count is not None:
                due = min(due, self.count - self.sent)
            exhausted = False
            if due > 0:
                bodies = []
                try:
                    for _ in range(due):
                        bodies.append(as_body(next(self._items)))
                except StopIteration:
                    exhausted = True  # send what it made, then stop
                except Exception as exc:  # the generator raised: keep it for the panel and stop
                    self.error = exc
                    return
                try:
                    if bodies:
                        self.broker.send_batch(self.topic, bodies, queue=self.queue, progress=False)
                except Exception as exc:
                    self.error = exc
                    return
                self.sent += len(bodies)
            if exhausted or self.count is not None and self.sent >= self.count:
                return
            self._stopping.wait(TICK_S)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"RateProducer({self.topic!r}, {self.rate:g}/s, {state}, sent={self.sent})"


class ProducerPanel(LiveView):
    """Send records to ``topic``: type them (one per line, as text or JSON, with an optional key and
    queue) and press send; or, given a ``generator`` (``i -> record``, or an iterable), start a
    ``RateProducer`` at a chosen rate. The topic's end offsets per queue update live.

    ``start()`` keeps the offsets live (one renderer thread, as every live view)."""

    kind = "producer"
    needs_job = False

    def __init__(self, broker: Broker, topic: str, generator: Callable[[int], Any] | Iterable[Any] | None = None,
                 rate: int = 20, interval: float = 0.25, **kwargs: Any) -> None:
        info = broker.topic(topic)
        self.broker, self.topic = broker, topic
        self.records = ipywidgets.Textarea(placeholder="one record per line", rows=4,
                                           layout=ipywidgets.Layout(width="100%"))
        self.format = ipywidgets.ToggleButtons(options=["text", "JSON"], value="text", description="as",
                                               style={"button_width": "60px"})
        self.key = ipywidgets.Text(placeholder="(none)", description="key", layout=ipywidgets.Layout(width="220px"))
        self.queue = ipywidgets.Dropdown(options=[("by key / round robin", None), *[(str(q), q) for q in range(info.queues)]],
                                         description="queue", layout=ipywidgets.Layout(width="280px"))
        select(self.queue, None)  # "by key / round robin" shown, not an empty box
        self.send_button = ipywidgets.Button(description="send", icon="paper-plane", layout=ipywidgets.Layout(width="110px"))
        self.result = box()
        self.offsets = box()
        children: list[ipywidgets.Widget] = [self.records, row([self.format, self.key, self.queue, self.send_button]),
                                              self.result]
        self.producer: RateProducer | None = None
        self._showing = False  # the button is being set to match the generator, not clicked
        self.generator = generator
        self._made = 0  # records the generators before the current one made: i goes on from there
        self.rate = ipywidgets.IntSlider(value=rate, min=1, max=500, description="records/s",
                                         continuous_update=False, layout=ipywidgets.Layout(width="360px"))
        self.count = ipywidgets.IntText(value=0, description="how many", layout=ipywidgets.Layout(width="200px"),
                                        tooltip="0: until stopped")
        self.run_button = ipywidgets.ToggleButton(value=False, description="start generator", icon="play",
                                                  layout=ipywidgets.Layout(width="170px"))
        if generator is not None:
            children.append(row([self.rate, self.count, self.run_button]))
            self.rate.observe(self._rate_changed, names="value")
            self.run_button.observe(self._toggle, names="value")
        status_line = box()
        super().__init__(None, [status_line, *children, self.offsets], status_line, interval, **kwargs)
        self.send_button.on_click(lambda _b: self.send())
        self.refresh()

    @property
    def label(self) -> str:
        return self.topic

    def seen(self) -> Hashable:
        producer = self.producer
        return (tuple(self.broker.end_offsets(self.topic)), producer.sent if producer else 0,
                producer.running if producer else False)

    def snapshot(self) -> Any:
        """The topic's end offsets, one row per queue."""
        import pandas as pd

        return pd.DataFrame({"queue": range(len(ends := self.broker.end_offsets(self.topic))), "end_offset": ends})

    def draw(self) -> Hashable:
        seen = self.seen()
        ends = self.broker.end_offsets(self.topic)
        self.offsets.value = table(f"{self.topic}: end offsets", ["queue", "end_offset"], list(enumerate(ends)))
        producer = self.producer
        if producer is None:
            self.status_line.value = status(f"topic {self.topic!r}: {sum(ends)} messages in {len(ends)} queues")
        elif producer.error is not None:
            self.status_line.value = status(f"generator stopped after {producer.sent} records: {producer.error!r}", ALERT)
        else:
            state = "running" if producer.running else "stopped"
            self.status_line.value = status(f"generator {state} at {producer.rate:g} records/s: sent {producer.sent}; "
                                            f"topic {self.topic!r} holds {sum(ends)} messages")
            if not producer.running and self.run_button.value:
                self._show_running(False)  # it finished its count
        return seen

    def send(self) -> list[Any]:
        """Send what is typed in (one record per line); returns where each landed."""
        try:
            bodies = parse_lines(self.records.value, self.format.value)
        except ValueError as exc:
            self.result.value = status(str(exc), ALERT)
            return []
        if not bodies:
            self.result.value = note("type one record per line first")
            return []
        results = self.broker.send_batch(self.topic, bodies, key=self.key.value or None, queue=self.queue.value,
                                         progress=False)
        where = ", ".join(f"{r.queue_id}/{r.offset}" for r in results[:10]) + (" …" if len(results) > 10 else "")
        self.result.value = status(f"sent {counted(len(results), 'record')} (queue/offset: {where})")
        if not self.is_monitoring:
            self.refresh()
        return list(results)

    def _toggle(self, change: Any) -> None:
        if self._showing:
            return  # the panel set the button to match the generator: nothing to start or stop
        if change["new"]:
            self.start_generator()
        else:
            self.stop_generator()

    def _rate_changed(self, change: Any) -> None:
        if self.producer is not None:
            self.producer.rate = float(change["new"])

    def start_generator(self) -> RateProducer:
        """Start (or go on with) the generator at the slider's rate."""
        if self.generator is None:
            raise ValueError("this panel has no generator: ProducerPanel(broker, topic, generator=lambda i: ...)")
        if self.producer is None or self.producer.error is not None or self.producer.count is not None:
            count = self.count.value or None
            first = self._made + (self.producer.sent if self.producer is not None else 0)
            self._made = first
            self.producer = RateProducer(self.broker, self.topic, self.generator, self.rate.value, count,
                                         self.queue.value, first)
        self.producer.start()
        self._show_running(True)
        return self.producer

    def stop_generator(self) -> None:
        if self.producer is not None:
            self.producer.stop()
        self._show_running(False)
        if not self.is_monitoring:
            self.refresh()

    def _show_running(self, running: bool) -> None:
        """The button as the generator is, also when code (``start_generator()``) or the end of its
        count changed it rather than a click: pressed with "stop" while it runs, "start" when not."""
        self._showing = True
        try:
            self.run_button.value = running
        finally:
            self._showing = False
        self.run_button.description, self.run_button.icon = (
            ("stop generator", "stop") if running else ("start generator", "play"))
