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


def gather_sentences_meanwhile(meanwhile: Sequence[Callable[[], None]],
                               sentences_file: Optional[os.PathLike | str] = None,
                               tasks: Optional[str] = None, data_dirs: Sequence[str] = (),
                               task_files: Sequence[str] = ()) -> List[str]:
    """:func:`gather_sentences`, with the steps ``meanwhile`` run in this process at the same
    time.

    Why: before its first forward pass ``encode`` reads and deduplicates the tasks (pure
    Python, seconds for a benchmark suite) and imports torch, transformers and the model's
    code (seconds more); one after the other they kept a GPU idle for the first ~20 s of a
    run (docs/encode.md, "Before the first batch"). Tasks are read in a spawned helper
    process while this one takes the steps, so the two overlap. A step must not raise; the
    inputs' errors are raised here as themselves (estratos errors pickle with their fields),
    and once the helper has failed no further step is taken. With one usable core, or a
    sentences file (one read), the inputs are read here and the steps are left to the
    caller's own later imports."""
    import multiprocessing

    from estratos.options import available_cores

    by_tasks = tasks is not None or bool(task_files)
    if sentences_file is not None or not by_tasks or available_cores() < 2:
        return gather_sentences(sentences_file, tasks, data_dirs, task_files)
    pool = multiprocessing.get_context("spawn").Pool(1, initializer=_ignore_sigint)
    try:
        pending = pool.apply_async(gather_sentences,
                                   (None, tasks, list(data_dirs), list(task_files)))
        for step in meanwhile:
            if pending.ready() and not pending.successful():
                break
            step()
        sentences: List[str] = pending.get()
    finally:
        pool.terminate()
        pool.join()
    return sentences
