"""Running a grid's jobs (task surveys, then work units): in this process, or in a pool of
worker processes kept busy until the last unit ends.

Why our own small pool rather than :mod:`concurrent.futures`: the grid needs to feed units one
at a time, longest first, so that exactly ``jobs`` processes are busy and none sits on a queue
of work another could take; to hear from a unit while it runs (cells are reported as they are
written, for the progress bar); to stop every worker at once on Ctrl-C; and to fail only the
unit of a worker that died (e.g. killed for memory), naming its task, while the others go on.

A *runner* does the work: ``factory(context)`` builds it (in each worker, or once here); it is
a context manager with ``survey(payload) -> value`` and ``run(payload, report) -> seconds``,
where ``report(value)`` forwards partial results. Events are :class:`Event` members. A unit
starts with ``START`` (for the ETA); every job ends in exactly one event besides the
``START`` and ``CELLS`` reports: ``SURVEY``, ``DONE``, ``ERROR`` (the :class:`EstratosError`
itself: errors pickle with their fields) or ``BUG`` (any other exception, as its traceback
text).

Start-up: a spawned worker needs seconds to start Python and import torch before it can take
a job, and ``--jobs 2`` must not lose that against ``--jobs 1``. So:

- workers are spawned *before* the runner's context exists (:func:`make_executor`), importing
  the ``preload`` modules while the parent still checks options and imports the same
  libraries itself: the two imports overlap instead of following each other;
  :meth:`WorkerPool.start` then hands every worker the runner's factory and context (a
  worker says ``HELLO`` once its imports are done and is sent them then, so the parent
  never blocks on a pipe a busy importer does not read);
- the parent is one of the ``jobs`` processes: it spawns ``jobs - 1`` workers and takes jobs
  from the same queue itself (the first, longest one at once), while a thread of it feeds
  the workers. Workers say ``READY`` once their runner is built, and only ready workers
  are sent jobs, so no job waits on a worker that is still importing while the parent could
  run it.
"""

from __future__ import annotations

import enum
import importlib
import logging
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections import deque
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from estratos.errors import EstratosError

log = logging.getLogger(__name__)



class Event(str, enum.Enum):
    """What a job or a worker says (a ``str``, so it pickles and compares as its value):
    the job kinds ``SURVEY`` and ``UNIT``; a unit's ``START`` and ``CELLS`` (partial
    reports); a job's end, ``SURVEY`` (with its value), ``DONE``, ``ERROR`` (a user error)
    or ``BUG`` (any other exception); a worker's ``HELLO`` (imports done) and ``READY``
    (runner built)."""

    SURVEY = "survey"
    UNIT = "unit"
    START = "start"
    CELLS = "cells"
    DONE = "done"
    ERROR = "error"
    BUG = "bug"
    HELLO = "hello"
    READY = "ready"


#: (kind, key, payload): kind is Event.SURVEY or Event.UNIT; key names the job in events
Job = Tuple[Event, Any, Any]
#: on_event(kind, key, value)
EventSink = Callable[[Event, Any, Any], None]


#: events that report on a job without ending it
PARTIAL_EVENTS = frozenset({Event.START, Event.CELLS})
#: a worker that dies before it is ready this many times in a row stops the run
MAX_START_FAILURES = 3


def _run_job(runner: Any, job: Job, send: EventSink) -> None:
    kind, key, payload = job
    if kind == Event.SURVEY:
        send(Event.SURVEY, key, runner.survey(payload))
    else:
        send(Event.START, key, None)
        seconds = runner.run(payload, lambda value: send(Event.CELLS, key, value))
        send(Event.DONE, key, seconds)


def _run_caught(runner: Any, job: Job, send: EventSink) -> None:
    """:func:`_run_job` with user errors turned into an ``"error"`` event."""
    try:
        _run_job(runner, job, send)
    except EstratosError as exc:
        send(Event.ERROR, job[1], exc)


class InProcess:
    """Runs jobs one after the other in this process (``--jobs 1``, or one GPU process).

    User errors become ``ERROR`` events like in the pool; other exceptions (bugs) and
    Ctrl-C propagate with their traceback.
    """

    def __init__(self) -> None:
        self._runner_cm: Optional[Any] = None
        self.runner: Optional[Any] = None
        self.processes = 1

    def start(self, factory: Callable[[Any], Any], context: Any) -> None:
        """Build the runner (``factory(context)``, entered until :meth:`close`)."""
        cm = factory(context)
        self.runner = cm.__enter__()
        self._runner_cm = cm

    def run(self, jobs: Iterable[Job], on_event: EventSink,
            pinned: Optional[Callable[[Job], bool]] = None) -> None:
        """Run ``jobs`` in order (``pinned`` changes nothing here: every job runs here)."""
        if self.runner is None:
            raise RuntimeError("start() the executor before run()")
        for job in jobs:
            _run_caught(self.runner, job, on_event)

    def close(self) -> None:
        if self._runner_cm is not None:
            self._runner_cm.__exit__(None, None, None)
            self._runner_cm = self.runner = None

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


def _log_setup() -> Tuple[int, Optional[logging.Formatter]]:
    """The level of estratos's loggers here and the root handler's formatter, for the
    workers (a spawned process starts with logging unconfigured: ``-v`` would show only the
    parent's half of the work). The formatter goes as itself (format, style, date format)."""
    root = logging.getLogger()
    formatter = root.handlers[0].formatter if root.handlers else None
    try:
        pickle.dumps(formatter)
    except Exception:  # noqa: BLE001 - a formatter of the caller's that does not pickle
        formatter = None
    return logging.getLogger("estratos").getEffectiveLevel(), formatter


def _configure_logging(log_setup: Tuple[int, Optional[logging.Formatter]]) -> None:
    """In a worker: estratos's log records to stderr at the parent's level, formatted as
    the parent formats them."""
    level, formatter = log_setup
    if formatter is not None:
        handler = logging.StreamHandler()
        handler.setFormatter(formatter)
        logging.getLogger().addHandler(handler)
    logging.getLogger("estratos").setLevel(level)


def serve(conn: Any, parent: int, preload: Sequence[str] = (),
          log_setup: Tuple[int, Optional[logging.Formatter]] = (logging.WARNING, None)
          ) -> None:
    """A worker process: import ``preload``, say ``HELLO``, receive ``(factory, context)``,
    build the runner, say ``READY``, then run the jobs the parent sends until it sends None
    or goes away. It logs to stderr as the parent does (``log_setup``: :func:`_log_setup`).

    SIGINT is ignored here: Ctrl-C reaches every process of the terminal's group, and the
    parent alone decides how to stop (it terminates the workers).
    """
    _configure_logging(log_setup)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()

    def send(kind: Event, key: Any, value: Any) -> None:
        conn.send((kind, key, value))

    for name in preload:
        importlib.import_module(name)
    send(Event.HELLO, None, None)
    try:
        setup = conn.recv_bytes()
    except (EOFError, OSError):
        return
    factory, context = pickle.loads(setup)
    with factory(context) as runner:
        send(Event.READY, None, None)
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):
                return
            if job is None:
                break
            try:
                _run_job(runner, job, send)
            except EstratosError as exc:
                send(Event.ERROR, job[1], _portable(exc))
            except Exception:  # noqa: BLE001 - a bug: the parent raises it with this traceback
                send(Event.BUG, job[1], traceback.format_exc())
    # told to stop, with every result written and the runner closed: the parent waits for
    # this exit, so skip the interpreter's teardown of torch (0.2-0.3 s)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(0)


class WorkerPool:
    """``processes - 1`` spawned workers plus this process, each running one job at a time
    (see the module docstring).

    Workers are spawned at construction and import ``preload`` at once; :meth:`start` gives
    them (and this process) the runner. Use as a context manager: leaving it (normally, on
    an error or on Ctrl-C) stops every worker; a worker in the middle of a unit is
    terminated, which is safe because results are appended as whole lines under a lock (a
    torn line is cut off by the next append). This process's own jobs run in the calling
    thread (Ctrl-C stops them as with one process); a feeder thread sends jobs to the ready
    workers and passes their events on. ``on_event`` is called from both threads, never at
    the same time.
    """

    def __init__(self, processes: int, preload: Sequence[str] = ()) -> None:
        import multiprocessing

        self._ctx = multiprocessing.get_context("spawn")
        self._preload = tuple(preload)
        self._setup: Optional[bytes] = None  # the pickled (factory, context)
        self.processes = processes
        self._workers: List[Tuple[Any, Any]] = []
        self._ready: Set[int] = set()
        self._start_failures = 0
        self._local: Optional[Any] = None
        self._local_cm: Optional[Any] = None
        try:
            for _ in range(processes - 1):
                self._workers.append(self._start())
        except BaseException:  # Ctrl-C while starting: stop the ones already started
            self.close(graceful=False)
            raise

    def start(self, factory: Callable[[Any], Any], context: Any) -> None:
        """Give the workers (as each says ``HELLO``) and this process the runner
        ``factory(context)``; this process builds its own at once, while the workers may
        still be importing."""
        try:
            # pickled once, here: a context that does not pickle (a lambda loader) fails now,
            # before any work, not in the feeder thread when a worker asks for it
            self._setup = bytes(ForkingPickler.dumps((factory, context)))
            cm = factory(context)
            self._local = cm.__enter__()
            self._local_cm = cm
        except BaseException:
            self.close(graceful=False)
            raise

    def _start(self) -> Tuple[Any, Any]:
        parent_end, child_end = self._ctx.Pipe()
        proc = self._ctx.Process(target=serve, daemon=True,
                                 args=(child_end, os.getpid(), self._preload, _log_setup()))
        # the child is born ignoring SIGINT (an ignored signal stays ignored across exec, and
        # Python keeps it so): a Ctrl-C while it still imports must not print its traceback;
        # the parent alone stops it. (Only the main thread may set handlers; a restart from
        # the feeder thread keeps the default, as before.)
        restore = None
        if threading.current_thread() is threading.main_thread():
            restore = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            proc.start()
        finally:
            if restore is not None:
                signal.signal(signal.SIGINT, restore)
        child_end.close()
        return proc, parent_end

    def run(self, jobs: Iterable[Job], on_event: EventSink,
            pinned: Optional[Callable[[Job], bool]] = None) -> None:
        """Run ``jobs`` in order, each on the next free process (this one included);
        returns when all have ended. Jobs for which ``pinned(job)`` is true (those for a
        GPU) run only in this process, which takes them before any other; every process
        takes the other jobs."""
        if self._local is None or self._setup is None:
            raise RuntimeError("start() the executor before run()")
        own: Deque[Job] = deque()
        queue: Deque[Job] = deque()
        for item in jobs:
            (own if pinned is not None and pinned(item) else queue).append(item)
        lock = threading.Lock()
        stop = threading.Event()
        failed: List[BaseException] = []

        def send(kind: Event, key: Any, value: Any) -> None:
            with lock:
                on_event(kind, key, value)

        def take() -> Optional[Job]:
            with lock:
                return queue.popleft() if queue else None

        def take_local() -> Optional[Job]:
            with lock:
                if own:
                    return own.popleft()
                return queue.popleft() if queue else None

        def feed() -> None:
            try:
                self._feed(queue, take, send, stop)
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                failed.append(exc)
                stop.set()

        feeder = threading.Thread(target=feed, name="estratos-feeder", daemon=True)
        feeder.start()
        try:
            while not stop.is_set():
                job = take_local()
                if job is None:
                    break
                _run_caught(self._local, job, send)
            while feeder.is_alive():
                feeder.join(0.2)
        finally:
            stop.set()
            feeder.join()
        if failed:
            raise failed[0]

    def _feed(self, queue: Deque[Job], take: Callable[[], Optional[Job]], send: EventSink,
              stop: threading.Event) -> None:
        """The feeder thread: jobs to ready idle workers, their events to ``send``; ends when
        the queue is empty and no worker is busy (or on ``stop``)."""
        from multiprocessing.connection import wait

        busy: Dict[int, Job] = {}
        while not stop.is_set() and (queue or busy):
            for w in sorted(self._ready - set(busy)):
                job = take()
                if job is None:
                    break
                self._workers[w][1].send(job)
                busy[w] = job
            if not queue and not busy:
                return
            conns = {conn: w for w, (_, conn) in enumerate(self._workers)}
            sentinels = {proc.sentinel: w for w, (proc, _) in enumerate(self._workers)}
            for ready in wait(list(conns) + list(sentinels), timeout=0.1):
                if ready in conns:
                    w = conns[ready]
                    if self._workers[w][1] is not ready:
                        continue  # restarted meanwhile
                    try:
                        kind, key, value = ready.recv()
                    except (EOFError, OSError):
                        continue  # the worker died: its sentinel reports it
                    if kind == Event.HELLO:  # its imports are done: it reads the setup now
                        try:
                            self._workers[w][1].send_bytes(self._setup)
                        except (OSError, ValueError):
                            pass  # it died meanwhile: its sentinel reports it
                        continue
                    if kind == Event.READY:
                        self._ready.add(w)
                        self._start_failures = 0
                        continue
                    send(kind, key, value)
                    if kind not in PARTIAL_EVENTS:
                        del busy[w]
                else:
                    self._reap(sentinels[ready], ready, busy, send)

    def _reap(self, w: int, sentinel: Any, busy: Dict[int, Job], send: EventSink) -> None:
        """Worker ``w`` died: pass on what it sent before, fail its job, start another."""
        proc, conn = self._workers[w]
        if proc.sentinel is not sentinel:
            return  # restarted meanwhile
        while conn.poll():
            try:
                kind, key, value = conn.recv()
            except (EOFError, OSError):
                break
            if kind in (Event.HELLO, Event.READY) or w not in busy:
                continue
            send(kind, key, value)
            if kind not in PARTIAL_EVENTS:
                del busy[w]
        proc.join()
        if w in busy:
            job = busy.pop(w)
            send(Event.ERROR, job[1], EstratosError(
                f"the worker process running it died (exit code {proc.exitcode}"
                f"{'; killed: out of memory?' if proc.exitcode == -9 else ''})"))
        elif w not in self._ready:
            self._start_failures += 1
            if self._start_failures > MAX_START_FAILURES * len(self._workers):
                raise RuntimeError("probe worker processes keep dying while starting "
                                   f"(exit code {proc.exitcode})")
        conn.close()
        self._ready.discard(w)
        self._workers[w] = self._start()

    def close(self, *, graceful: bool = True) -> None:
        # a worker still starting has done nothing: it is not waited for
        polite = [graceful and w in self._ready for w in range(len(self._workers))]
        for (proc, conn), wait_for in zip(self._workers, polite):
            if wait_for and proc.is_alive():
                try:
                    conn.send(None)
                except (OSError, ValueError):
                    pass
        for (proc, conn), wait_for in zip(self._workers, polite):
            if wait_for:
                proc.join(5)
            if proc.is_alive():
                proc.terminate()
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
            conn.close()
        self._workers = []
        self._ready = set()
        if self._local_cm is not None:
            self._local_cm.__exit__(None, None, None)
            self._local_cm = self._local = None

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.close(graceful=exc_type is None)


def make_executor(processes: int, preload: Sequence[str] = ()) -> Any:
    """:class:`InProcess` for one process, else a :class:`WorkerPool` whose workers start
    (and import ``preload``) now; either is given its runner with ``start(factory,
    context)`` before ``run``."""
    if processes <= 1:
        return InProcess()
    return WorkerPool(processes, preload)
