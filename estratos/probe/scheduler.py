"""Running a grid's jobs (task surveys, then work units): in this process, or in a pool of
worker processes kept busy until the last unit ends.

Why our own small pool rather than :mod:`concurrent.futures`: the grid needs to feed units one
at a time, longest first, so that exactly ``jobs`` processes are busy and none sits on a queue
of work another could take; to hear from a unit while it runs (cells are reported as they are
written, for the progress bar); to stop every worker at once on Ctrl-C; and to fail only the
unit of a worker that died (e.g. killed for memory), naming its task, while the others go on.

A *runner* does the work: ``factory(context)`` builds it (in each worker, or once here); it is
a context manager with ``survey(payload) -> value`` and ``run(payload, report) -> seconds``,
where ``report(value)`` forwards partial results. Every job ends in exactly one event besides
the ``"cells"`` reports: ``"survey"``, ``"done"``, ``"error"`` (the :class:`EstratosError` itself: errors pickle
with their fields) or ``"bug"`` (any other exception, as its traceback text).
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import threading
import time
import traceback
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterable, List, Tuple

from estratos.errors import EstratosError

log = logging.getLogger(__name__)

#: (kind, key, payload): kind is "survey" or "unit"; key names the job in events
Job = Tuple[str, Any, Any]
#: on_event(kind, key, value)
EventSink = Callable[[str, Any, Any], None]


def _run_job(runner: Any, job: Job, send: EventSink) -> None:
    kind, key, payload = job
    if kind == "survey":
        send("survey", key, runner.survey(payload))
    else:
        seconds = runner.run(payload, lambda value: send("cells", key, value))
        send("done", key, seconds)


class InProcess:
    """Runs jobs one after the other in this process (``--jobs 1``, or one GPU process).

    User errors become ``"error"`` events like in the pool; other exceptions (bugs) and
    Ctrl-C propagate with their traceback.
    """

    def __init__(self, factory: Callable[[Any], Any], context: Any) -> None:
        self._runner_cm = factory(context)
        self.runner = self._runner_cm.__enter__()
        self.processes = 1

    def run(self, jobs: Iterable[Job], on_event: EventSink) -> None:
        for job in jobs:
            try:
                _run_job(self.runner, job, on_event)
            except EstratosError as exc:
                on_event("error", job[1], exc)

    def close(self) -> None:
        self._runner_cm.__exit__(None, None, None)

    def __enter__(self) -> "InProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _portable(exc: EstratosError) -> EstratosError:
    """``exc`` if it pickles (every estratos error does, fields included), else an
    :class:`EstratosError` with its message (a subclass defined elsewhere that does not)."""
    try:
        pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - any pickling failure: keep the message
        return EstratosError(str(exc))
    return exc


def _watch_parent(parent: int) -> None:
    """Exit when the parent is gone (a SIGKILLed grid must not leave workers training)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


def serve(conn: Any, factory: Callable[[Any], Any], context: Any, parent: int) -> None:
    """A worker process: run the jobs the parent sends until it sends None or goes away.

    SIGINT is ignored here: Ctrl-C reaches every process of the terminal's group, and the
    parent alone decides how to stop (it terminates the workers).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()

    def send(kind: str, key: Any, value: Any) -> None:
        conn.send((kind, key, value))

    with factory(context) as runner:
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):
                return
            if job is None:
                return
            try:
                _run_job(runner, job, send)
            except EstratosError as exc:
                send("error", job[1], _portable(exc))
            except Exception:  # a bug: the parent raises it with this traceback
                send("bug", job[1], traceback.format_exc())


class WorkerPool:
    """``processes`` spawned workers, each fed one job at a time (see the module docstring).

    Use as a context manager: leaving it (normally, on an error or on Ctrl-C) stops every
    worker; a worker in the middle of a unit is terminated, which is safe because results
    are appended as whole lines under a lock (a torn line is cut off by the next append).
    """

    def __init__(self, factory: Callable[[Any], Any], context: Any, processes: int) -> None:
        import multiprocessing

        self._ctx = multiprocessing.get_context("spawn")
        self._factory = factory
        self._context = context
        self.processes = processes
        self._workers: List[Tuple[Any, Any]] = []
        try:
            for _ in range(processes):
                self._workers.append(self._start())
        except BaseException:  # Ctrl-C while starting: stop the ones already started
            self.close(graceful=False)
            raise

    def _start(self) -> Tuple[Any, Any]:
        parent_end, child_end = self._ctx.Pipe()
        proc = self._ctx.Process(target=serve, daemon=True,
                                 args=(child_end, self._factory, self._context, os.getpid()))
        proc.start()
        child_end.close()
        return proc, parent_end

    def run(self, jobs: Iterable[Job], on_event: EventSink) -> None:
        """Run ``jobs`` in order, each on the next idle worker; returns when all have ended."""
        from multiprocessing.connection import wait

        queue: Deque[Job] = deque(jobs)
        busy: Dict[int, Job] = {}
        while queue or busy:
            for w in range(len(self._workers)):
                if queue and w not in busy:
                    job = queue.popleft()
                    self._workers[w][1].send(job)
                    busy[w] = job
            conns = {self._workers[w][1]: w for w in busy}
            sentinels = {self._workers[w][0].sentinel: w for w in busy}
            for ready in wait(list(conns) + list(sentinels)):
                if ready in conns:
                    w = conns[ready]
                    if w not in busy:
                        continue
                    try:
                        kind, key, value = ready.recv()
                    except (EOFError, OSError):
                        continue  # the worker died: its sentinel reports it
                    on_event(kind, key, value)
                    if kind != "cells":
                        del busy[w]
                else:
                    w = sentinels[ready]
                    proc, conn = self._workers[w]
                    while w in busy and conn.poll():  # what it sent before dying
                        try:
                            kind, key, value = conn.recv()
                        except (EOFError, OSError):
                            break
                        on_event(kind, key, value)
                        if kind != "cells":
                            del busy[w]
                    if w in busy:
                        proc.join()
                        job = busy.pop(w)
                        on_event("error", job[1], EstratosError(
                            f"the worker process running it died (exit code {proc.exitcode}"
                            f"{'; killed: out of memory?' if proc.exitcode == -9 else ''})"))
                    conn.close()
                    self._workers[w] = self._start()

    def close(self, *, graceful: bool = True) -> None:
        for proc, conn in self._workers:
            if graceful and proc.is_alive():
                try:
                    conn.send(None)
                except (OSError, ValueError):
                    pass
        for proc, conn in self._workers:
            if graceful:
                proc.join(5)
            if proc.is_alive():
                proc.terminate()
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
            conn.close()
        self._workers = []

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.close(graceful=exc_type is None)


def make_executor(factory: Callable[[Any], Any], context: Any, processes: int) -> Any:
    """:class:`InProcess` for one process, else a :class:`WorkerPool`."""
    if processes <= 1:
        return InProcess(factory, context)
    return WorkerPool(factory, context, processes)
