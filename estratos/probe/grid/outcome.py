"""What a probe run returns: the records written, how the run went, and its summary.

Why its own module: the CLI, the demo and the benchmarks read a run's outcome
(:class:`ProbeRun`, :func:`summarize`) without needing the runner's machinery.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

from estratos.probe.grid.plan import WorkUnit
from estratos.results import ResultRecord
from estratos.vocab import RAW_FEATURES, STANDARDIZED_FEATURES


@dataclasses.dataclass(frozen=True)
class UnitStat:
    """How one unit went: what it was, how long it took, how many cells it wrote."""

    unit: WorkUnit
    seconds: float
    written: int


class ProbeRun(Sequence[ResultRecord]):
    """The records a run wrote (a sequence, in grid order: task, seed, layer spec) and how
    the run went: ``out`` (the results file written), ``seconds`` (wall time), ``device``,
    ``processes``, ``already_done`` (cells skipped because they were done), ``units``
    (:class:`UnitStat` of each unit run)."""

    def __init__(self, records: Sequence[ResultRecord], out: Path, seconds: float,
                 device: str, processes: int, already_done: int,
                 units: Sequence[UnitStat] = ()) -> None:
        self.records = list(records)
        self.out = out
        self.seconds = seconds
        self.device = device
        self.processes = processes
        self.already_done = already_done
        self.units = list(units)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: Any) -> Any:
        return self.records[i]

    def __iter__(self) -> Iterator[ResultRecord]:
        return iter(self.records)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ProbeRun):
            return self.records == other.records
        if isinstance(other, (list, tuple)):
            return self.records == list(other)
        return NotImplemented

    # compared by value and mutable: unhashable, as a list is (typeshed types __hash__ as a
    # method, so None needs the ignore)
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ProbeRun({len(self.records)} records, out={str(self.out)!r})"

    def timing(self) -> str:
        """One line: cells, wall time, cells/s, device and processes."""
        rate = len(self.records) / self.seconds if self.seconds > 0 else 0.0
        done = f"; {self.already_done} already done" if self.already_done else ""
        return (f"{len(self.records)} cell(s) in {self.seconds:.1f} s ({rate:.2f} cells/s) "
                f"on {self.device}, {self.processes} process(es){done}")

    def describe(self, command: Optional[Sequence[str]] = None) -> str:
        """The terminal summary: cells written, each task's best layer spec, timing.
        ``command``: the words of the command that ran (the CLI's), so that the hint for
        one-class cells on raw features gives the command that reads them standardized."""
        text = summarize(self.records, self.out, command)
        return text if not self.records else f"{text}\n{self.timing()}"


def standardized_command(command: Sequence[str]) -> str:
    """``command`` (its words) reading standardized features: its ``--features`` value
    replaced, or the option added; quoted for a POSIX shell."""
    words = list(command)
    for i, word in enumerate(words):
        if word == "--features" and i + 1 < len(words):
            words[i + 1] = STANDARDIZED_FEATURES
            break
        if word.startswith("--features="):
            words[i] = f"--features={STANDARDIZED_FEATURES}"
            break
    else:
        words += ["--features", STANDARDIZED_FEATURES]
    return shlex.join(words)


def summarize(records: Sequence[ResultRecord], out: os.PathLike | str,
              command: Optional[Sequence[str]] = None) -> str:
    """A few lines for the terminal: cells written, and each task's best layer spec.

    A cell whose score is undefined (null, e.g. a correlation of constant cosines) is left
    out of the best-layer mean; a task with no defined score says so. A layer spec where a
    seed's probe predicted one class for at least 99 % of the test examples is never called
    best; the summary names those layers and, for raw features, says the probe could not
    read them and how to read them standardized."""
    if not records:
        return f"nothing to do: every cell is already in {out} (use --overwrite to redo)"
    lines = [f"wrote {len(records)} cell(s) to {out}"]
    by_task: Dict[str, Dict[Any, List[float]]] = {}
    one_class: Dict[str, Dict[Any, None]] = {}
    raw_one_class = 0
    for r in records:
        scores = by_task.setdefault(r.task, {}).setdefault(r.layer, [])
        if r.score is not None:
            scores.append(float(r.score))
        if r.degenerate:
            one_class.setdefault(r.task, {})[r.layer] = None
            raw_one_class += r.features == RAW_FEATURES and r.control is None
    for task, layers in by_task.items():
        flagged = one_class.get(task, {})
        means = {layer: sum(v) / len(v) for layer, v in layers.items()
                 if v and layer not in flagged}
        note = ""
        if flagged:
            ordered = sorted(flagged, key=lambda x: (not isinstance(x, int), str(x).zfill(4)))
            note += f"; one class at layer {', '.join(map(str, ordered))}"
        undefined = [str(layer) for layer, v in layers.items() if not v]
        if undefined:
            note += f"; undefined at layer {', '.join(undefined)}"
        kind = {k for r in records if r.task == task and (k := r.control_kind)}
        what = f" ({', '.join(sorted(kind))})" if kind else ""
        if not means:
            lines.append(f"  {task}{what}: no layer read by the probe{note}")
            continue
        best = max(means, key=lambda k: means[k])
        lines.append(f"  {task}{what}: best layer {best} ({means[best]:.2f}, mean over "
                     f"seeds){note}")
    if raw_one_class:
        lines.append(f"{raw_one_class} cell(s) on raw features predicted one class for at "
                     "least 99 % of the test examples: the probe could not read those "
                     "features, which does not mean the layer is empty. Read them "
                     "standardized before concluding (same --out: both readings are kept):")
        lines.append("  " + (standardized_command(command) if command else
                             "the same command with --features standardized"))
    return "\n".join(lines)
