"""Where the sentences to encode come from: a plain text file, or the selected tasks.

A sentences file is UTF-8, one sentence per line; blank lines are skipped (they are not
sentences). Invalid UTF-8 is reported with its line number rather than silently replaced,
because a replaced character would change the sentence's key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from estratos.errors import InputError, OptionError


def read_sentence_file(path: os.PathLike | str) -> List[str]:
    """The non-blank lines of a UTF-8 file (raises :class:`InputError` naming file and line)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise InputError("no such file", path) from exc
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path) from exc
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    out = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"invalid UTF-8 at byte {exc.start + 1} of the line",
                             path, number) from exc
        line = line.rstrip("\r")
        if line.strip():
            out.append(line)
    if not out:
        raise InputError("no sentences (the file is empty or blank)", path)
    return out


def task_sentences(task_expr: Optional[str], data_dirs: Sequence[str],
                   task_files: Sequence[str] = ()) -> List[str]:
    """The unique sentences of the selected tasks (``--tasks IDS --data-dir DIR``, plus
    ``--task-file`` specs: :func:`estratos.tasks.selection.select_specs`).

    Each sentence appears once, in task order then file order.
    """
    from estratos.tasks import unique_sentences
    from estratos.tasks.selection import select_specs

    selection = select_specs(task_expr, task_files, data_dirs)
    return unique_sentences(selection.specs, selection.data_dirs)


def gather_sentences(sentences_file: Optional[os.PathLike | str] = None,
                     tasks: Optional[str] = None,
                     data_dirs: Sequence[str] = (),
                     task_files: Sequence[str] = ()) -> List[str]:
    """The sentences named by ``--sentences FILE`` or by tasks (``--tasks IDS`` and/or
    ``--task-file TASK.toml``, with ``--data-dir DIR``): exactly one of the two."""
    by_tasks = tasks is not None or bool(task_files)
    if (sentences_file is None) != by_tasks:
        raise OptionError("give exactly one of --sentences FILE and --tasks IDS "
                          "(or --task-file TASK.toml)")
    if sentences_file is not None:
        if data_dirs:
            raise OptionError("--data-dir: only used with --tasks")
        return read_sentence_file(sentences_file)
    return task_sentences(tasks, data_dirs, task_files)


def _ignore_sigint() -> None:
    """In the helper process: Ctrl-C is the parent's to handle (it stops the helper)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


#: the usable cores from which the tasks are read in helper processes: on two cores the
#: helper and the imports share them and made no measurable difference (bench/encode_phases.py
#: on es-senteval, a shared machine: 15-21 s outside the encoding with or without one), so
#: small machines keep one process; on the 16-core H100 node the run went from 48.2 s to
#: 31.7 s (docs/encode.md, "Before the first batch")
HELPERS_FROM_CORES = 4


def _spawnable() -> bool:
    """Whether a spawned process can start here: it imports the caller's main module again,
    which a program read from stdin (``python - < file``) does not have as a file (its
    helpers would die starting, over and over)."""
    import sys

    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    return main_file is None or os.path.exists(main_file)


def _one_task_sentences(tasks: Optional[str], data_dirs: Sequence[str],
                        task_files: Sequence[str], index: int) -> List[str]:
    """In a helper process: the sentences of the ``index``-th task of the selection (the
    selection is made again there: a task spec does not pickle)."""
    from estratos.tasks import load_task
    from estratos.tasks.selection import select_specs

    selection = select_specs(tasks, task_files, data_dirs)
    return list(load_task(selection.specs[index], selection.data_dirs).sentences)


def gather_sentences_meanwhile(meanwhile: Sequence[Callable[[], None]],
                               sentences_file: Optional[os.PathLike | str] = None,
                               tasks: Optional[str] = None, data_dirs: Sequence[str] = (),
                               task_files: Sequence[str] = ()) -> List[str]:
    """:func:`gather_sentences`, with the steps ``meanwhile`` run in this process at the same
    time.

    Why: before its first forward pass ``encode`` reads and deduplicates the tasks (pure
    Python, seconds for a benchmark suite) and imports torch, transformers and the model's
    code (seconds more); one after the other they kept a GPU idle for the first ~20 s of a
    run (docs/encode.md, "Before the first batch"). The tasks are read in spawned helper
    processes, one task at a time each, as many as the other usable cores, while this
    process takes the steps; the sentences are then joined in task
    order, each once, exactly as :func:`gather_sentences` gives them. The selection itself
    is checked here first. A step must not raise; the inputs' errors are raised here as
    themselves (estratos errors pickle with their fields), the first task's in selection
    order first, and once a helper has failed no further step is taken. With fewer than
    :data:`HELPERS_FROM_CORES` usable cores, or a sentences file (one read), the inputs are
    read here and the steps are left to the caller's own later imports."""
    import multiprocessing

    from estratos.devices import available_cores

    by_tasks = tasks is not None or bool(task_files)
    if sentences_file is not None or not by_tasks or available_cores() < HELPERS_FROM_CORES \
            or not _spawnable():
        return gather_sentences(sentences_file, tasks, data_dirs, task_files)
    from estratos.tasks.selection import select_specs

    n_tasks = len(select_specs(tasks, task_files, data_dirs).specs)
    helpers = max(1, min(available_cores() - 1, n_tasks))
    pool = multiprocessing.get_context("spawn").Pool(helpers, initializer=_ignore_sigint)
    try:
        pending = [pool.apply_async(_one_task_sentences,
                                    (tasks, list(data_dirs), list(task_files), i))
                   for i in range(n_tasks)]
        for step in meanwhile:
            if any(p.ready() and not p.successful() for p in pending):
                break
            step()
        seen: dict = {}
        for result in pending:
            for sentence in result.get():
                seen.setdefault(sentence, None)
    finally:
        pool.terminate()
        pool.join()
    return list(seen)
