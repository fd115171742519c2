"""Background threads joined by bounded queues, so that the slowest stage sets the pace.

Why threads: the heavy parts of every stage release the GIL (Rust tokenization, torch
kernels, HDF5 and numpy copies), and threads share the model, the tokenized arrays and the
open cache without copying or pickling. Bounded queues keep at most a few batches in flight,
so memory does not depend on the corpus size.

The first error in any stage stops all of them and is raised in the caller's thread (the
original exception, with its message and traceback); Ctrl-C in the caller's thread stops them
too. A stage never abandons a cache write half-way: it stops between items, so the cache's
own rule (``n_done`` moves only after a flushed block) keeps the file resumable.
"""

from __future__ import annotations

import queue
import threading
from queue import Queue
from typing import Any, Callable, List, Optional

#: marks the end of a stream of items
END = object()
#: seconds between checks of the stop flag while waiting on a queue or a thread
POLL = 0.05


class Stopped(Exception):
    """Raised inside a stage when another stage failed or the run was stopped."""


class Stages:
    """A set of stage threads and the queues between them; use as a context manager.

    ``spawn(name, fn, *args)`` runs ``fn(*args)`` in a thread; stages move items with
    :meth:`put` / :meth:`get` (which raise :class:`Stopped` once the run is stopping).
    Leaving the ``with`` block stops and joins every thread; :meth:`raise_error` re-raises the
    first stage error in the caller's thread.
    """

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.error: Optional[BaseException] = None
        self._threads: List[threading.Thread] = []
        self._lock = threading.Lock()

    def queue(self, depth: int) -> Queue[Any]:
        return queue.Queue(maxsize=max(1, depth))

    def fail(self, exc: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = exc
        self.stop.set()

    def spawn(self, name: str, fn: Callable[..., Any], *args: Any) -> threading.Thread:
        def body() -> None:
            try:
                fn(*args)
            except Stopped:
                pass
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                self.fail(exc)

        thread = threading.Thread(target=body, name=f"estratos-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    def put(self, q: Queue[Any], item: Any) -> None:
        while True:
            if self.stop.is_set():
                raise Stopped
            try:
                q.put(item, timeout=POLL)
                return
            except queue.Full:
                continue

    def get(self, q: Queue[Any]) -> Any:
        while True:
            if self.stop.is_set():
                raise Stopped
            try:
                return q.get(timeout=POLL)
            except queue.Empty:
                continue

    def wait(self, thread: threading.Thread) -> None:
        """Wait for ``thread`` to end (interruptible; returns early if a stage failed)."""
        while thread.is_alive() and not self.stop.is_set():
            thread.join(POLL)

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        """Stop every stage and wait for each to finish the item it is working on."""
        self.stop.set()
        for thread in self._threads:
            thread.join()

    def __enter__(self) -> "Stages":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Background:
    """One function running in a daemon thread; :meth:`result` waits (interruptibly) for it
    and returns its value or raises its exception."""

    def __init__(self, fn: Callable[..., Any], *args: Any, name: str = "background") -> None:
        self._value: Any = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._body, args=(fn, args),
                                        name=f"estratos-{name}", daemon=True)
        self._thread.start()

    def _body(self, fn: Callable[..., Any], args: tuple) -> None:
        try:
            self._value = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised by result()
            self._error = exc

    def result(self) -> Any:
        while self._thread.is_alive():
            self._thread.join(POLL)
        if self._error is not None:
            raise self._error
        return self._value
