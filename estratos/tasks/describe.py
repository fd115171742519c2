"""What ``estratos tasks list/show/check`` report: task summaries, details and file problems.

Listing is cheap by design: it only checks which files exist (and, when sizes are asked
for, counts lines); it parses only the tasks whose dev split is held out of a training
pool, since whether that pool is used at all depends on its contents (one repeating the
test file is replaced by a split of the test file), so the listing says what probe does.
``show`` loads one task fully; ``check`` loads the selected tasks in collect mode so every
problem is reported at once.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence

from estratos.errors import EstratosError, InputError, OptionError
from estratos.protocols import get_protocol
from estratos.registry import unknown_name
from estratos.tasks.building import holdout_sizes
from estratos.tasks.datadirs import DataDirs
from estratos.tasks.formats import get_format
from estratos.tasks.loading import POOL, load_task, plan_task
from estratos.tasks.reading import LoadContext
from estratos.tasks.types import TaskSpec

SPLIT_KEYS = ("train", "dev", "test")


def describe_task(spec: TaskSpec, data_dirs: DataDirs, counts: bool = False) -> Dict[str, Any]:
    """A summary of one task without reading its data.

    Keys: id, suite, name, group, language, combiner, protocol (effective), metric,
    n_classes (when the spec declares its labels), present, fallback, missing (files),
    sizes (``{train, dev, test}`` plus ``all`` or STS subsets; counted only when
    ``counts``, else None values).
    """
    info: Dict[str, Any] = {
        "id": spec.id, "suite": spec.suite, "name": spec.name, "group": spec.group,
        "language": spec.language, "combiner": spec.combiner, "protocol": spec.protocol,
        "metric": spec.metric, "n_classes": None if spec.labels is None else len(spec.labels),
        "present": False, "fallback": None, "missing": [],
        "sizes": dict.fromkeys(SPLIT_KEYS),
    }
    if get_protocol(spec.protocol).scores:
        info["n_classes"] = None
    try:
        plan = plan_task(spec, data_dirs)
    except OptionError as exc:
        info["missing"] = [exc.cli_text()]
        return info
    info.update(protocol=plan.protocol, present=plan.present, fallback=plan.fallback,
                missing=[str(p) for _, p in plan.missing])
    if plan.present and plan.holdout_from is not None:
        # where the dev split comes from depends on the data (a training pool that repeats
        # the test file is not used: the test file alone is split), so such a task is
        # loaded to say what probe will do, fallback and sizes alike
        try:
            data = load_task(spec, data_dirs)
        except EstratosError as exc:
            info["missing"].append(exc.cli_text())
            return info
        info["fallback"] = data.fallback
        if counts:
            info["sizes"] = {**dict.fromkeys(SPLIT_KEYS), **data.sizes}
        return info
    if not counts or not plan.present:
        return info
    fmt = get_format(spec.format)
    sizes: Dict[str, Optional[int]] = dict.fromkeys(SPLIT_KEYS)
    try:
        for source in plan.reads:
            n = fmt.count(spec, source)
            if source.split == POOL:
                sizes["train"], sizes["dev"] = (None, None) if n is None else holdout_sizes(n)
            else:
                before = sizes.get(source.split)
                sizes[source.split] = n if before is None else before + (n or 0)
    except (OSError, EstratosError) as exc:
        info["missing"].append(str(exc))
    if get_protocol(plan.protocol).subset_splits:
        sizes["test"] = sum(v for k, v in sizes.items() if k not in SPLIT_KEYS and v)
    info["sizes"] = sizes
    return info


def list_tasks(specs: Sequence[TaskSpec], data_dirs: DataDirs,
               counts: bool = False) -> List[Dict[str, Any]]:
    """:func:`describe_task` of each spec, in order."""
    return [describe_task(spec, data_dirs, counts) for spec in specs]


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _missing_note(row: Dict[str, Any]) -> Optional[str]:
    """Why a listed task's data is missing, as a note: the data folder option to give, or
    the first file not found."""
    missing = [str(m) for m in row.get("missing") or []]
    if not missing:
        return None
    if missing[0].startswith("--data-dir"):
        return missing[0]
    return f"not found: {missing[0]} (give its folder with --data-dir, or check it with " \
           f"`estratos tasks check {row['id']}`)"


def render_task_list(rows: Sequence[Dict[str, Any]], fmt: str = "table",
                     counts: bool = False) -> str:
    """The rows of :func:`list_tasks` as an aligned text table or as JSON.

    In the table, a ``*N`` mark points to the numbered notes printed below it: the fallback a
    present task uses, or why a missing task's data is missing (shared notes printed once).
    """
    if fmt == "json":
        return json.dumps(list(rows), indent=2, ensure_ascii=False)
    if fmt != "table":
        raise unknown_name("format", fmt, ("table", "json"), "--format")
    header = ["ID", "GROUP", "LANG", "PROTOCOL", "METRIC", "CLASSES"]
    if counts:
        header += ["TRAIN", "DEV", "TEST"]
    header += ["DATA"]
    table = [header]
    notes: List[str] = []
    for row in rows:
        if row["present"]:
            data = "present"
            if row["fallback"]:
                notes.append(row["fallback"])
                data += f" *{len(notes)}"
        else:
            data = "missing"
            why = _missing_note(row)
            if why:
                number = notes.index(why) + 1 if why in notes else len(notes) + 1
                if number > len(notes):
                    notes.append(why)
                data += f" *{number}"
        line = [row["id"], row["group"], row["language"], row["protocol"], row["metric"],
                _cell(row["n_classes"])]
        if counts:
            sizes = row["sizes"]
            line += [_cell(sizes.get("train")), _cell(sizes.get("dev")),
                     _cell(sizes.get("test") if sizes.get("all") is None else sizes["all"])]
        line.append(data)
        table.append(line)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in table]
    if notes:
        lines.append("")
        lines += [f"*{i} {text}" for i, text in enumerate(notes, start=1)]
    return "\n".join(lines)


def show_task(spec: TaskSpec, data_dirs: DataDirs) -> Dict[str, Any]:
    """Everything about one task, loading its data: spec, files, sizes, labels, an example."""
    data = load_task(spec, data_dirs)
    splits = {}
    for name, split in data.splits.items():
        entry: Dict[str, Any] = {"size": len(split)}
        if data.labels:
            counter = Counter(int(i) for i in split.labels)
            entry["label_counts"] = {data.labels[i]: counter[i] for i in sorted(counter)}
        if len(split):
            entry["example"] = {
                "sentences": [[data.sentences[i] for i in
                               slot.indices[slot.offsets[0]:slot.offsets[1]]]
                              for slot in split.slots],
                "label": (data.labels[int(split.labels[0])] if data.labels
                          else float(split.labels[0])),
            }
        splits[name] = entry
    return {
        "id": spec.id, "description": spec.description, "group": spec.group,
        "language": spec.language, "format": spec.format, "combiner": spec.combiner,
        "protocol": data.protocol, "metric": spec.metric,
        "extra_metrics": list(spec.extra_metrics),
        "classifier": dict(spec.classifier), "fallback": data.fallback,
        "sources": dict(data.sources), "n_sentences": len(data.sentences),
        "n_classes": len(data.labels) if data.labels else None,
        "labels": list(data.labels), "score_range": spec.score_range, "splits": splits,
    }


def render_task(info: Dict[str, Any], fmt: str = "text") -> str:
    """:func:`show_task`'s result as readable text (or JSON)."""
    if fmt == "json":
        return json.dumps(info, indent=2, ensure_ascii=False)
    lines = [f"{info['id']}: {info['description']}",
             f"  group {info['group']}, language {info['language']}, format {info['format']}, "
             f"combiner {info['combiner']}",
             f"  protocol {info['protocol']}, metric {info['metric']}"
             + (f" (+ {', '.join(info['extra_metrics'])})" if info["extra_metrics"] else "")]
    if info["classifier"]:
        lines.append("  classifier overrides: " + ", ".join(
            f"{k}={v}" for k, v in info["classifier"].items()))
    if info["fallback"]:
        lines.append(f"  fallback: {info['fallback']}")
    lines.append(f"  {info['n_sentences']} unique sentences")
    if info["labels"]:
        shown = info["labels"][:20]
        more = f" ... ({len(info['labels'])} in all)" if len(info["labels"]) > 20 else ""
        lines.append(f"  {info['n_classes']} classes: {', '.join(shown)}{more}")
    elif info["score_range"]:
        lines.append(f"  scores in [{info['score_range'][0]:g}, {info['score_range'][1]:g}]")
    for name, entry in info["splits"].items():
        lines.append(f"  {name}: {entry['size']} examples from {info['sources'].get(name, '?')}")
        if "example" in entry:
            example = entry["example"]
            shown = " | ".join(" + ".join(s) for s in example["sentences"])
            if len(shown) > 160:
                shown = shown[:157] + "..."
            lines.append(f"    e.g. [{example['label']}] {shown}")
    return "\n".join(lines)


def check_tasks(specs: Sequence[TaskSpec], data_dirs: DataDirs) -> List[str]:
    """Validate every file of ``specs``; every problem as ``path:line: message``.

    An empty list means every task loads cleanly. Unlike :func:`load_task`, a bad line does
    not stop the check: each file is read to the end (up to 20 problems shown per file).
    """
    problems: List[str] = []
    for spec in specs:
        ctx = LoadContext(collect=True)
        try:
            load_task(spec, data_dirs, ctx)
        except InputError as exc:  # file-level errors that end a file's reading
            ctx.problems.append(exc)
        except OptionError as exc:
            problems.append(f"{exc.cli_text()} [{spec.id}]")
            continue
        problems.extend(f"{message} [{spec.id}]" for message in ctx.messages())
    return problems


def tasks_with_files(specs: Sequence[TaskSpec], data_dirs: DataDirs) -> List[TaskSpec]:
    """The specs for which at least one data file exists (what ``tasks check`` checks by
    default: a task none of whose files are there is simply not installed)."""
    out = []
    for spec in specs:
        try:
            root = plan_task(spec, data_dirs).root
        except OptionError:
            continue
        sources = get_format(spec.format).sources(spec, root)
        if any(p.is_file() for src in sources.values() for p in src.paths):
            out.append(spec)
    return out
