"""What a probe run returns: the records written, how the run went, and its summary.

Why its own module: the CLI, the demo and the benchmarks read a run's outcome
(:class:`ProbeRun`, :func:`summarize`) without needing the runner's machinery.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence

from estratos.probe.grid import WorkUnit
from estratos.results import ResultRecord


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

    def describe(self) -> str:
        """The terminal summary: cells written, each task's best layer spec, timing."""
        text = summarize(self.records, self.out)
        return text if not self.records else f"{text}\n{self.timing()}"


def summarize(records: Sequence[ResultRecord], out: os.PathLike | str) -> str:
    """A few lines for the terminal: cells written, and each task's best layer spec.

    A cell whose score is undefined (null, e.g. a correlation of constant cosines) is left
    out of the best-layer mean; a task with no defined score says so."""
    if not records:
        return f"nothing to do: every cell is already in {out} (use --overwrite to redo)"
    lines = [f"wrote {len(records)} cell(s) to {out}"]
    by_task: Dict[str, Dict[Any, List[float]]] = {}
    for r in records:
        scores = by_task.setdefault(r.task, {}).setdefault(r.layer, [])
        if r.score is not None:
            scores.append(float(r.score))
    for task, layers in by_task.items():
        means = {layer: sum(v) / len(v) for layer, v in layers.items() if v}
        if not means:
            lines.append(f"  {task}: every score undefined")
            continue
        best = max(means, key=lambda k: means[k])
        undefined = [str(layer) for layer, v in layers.items() if not v]
        note = f"; undefined at layer {', '.join(undefined)}" if undefined else ""
        lines.append(f"  {task}: best layer {best} ({means[best]:.2f}, mean over seeds){note}")
    return "\n".join(lines)
