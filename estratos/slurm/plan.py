"""The pipeline as SLURM job scripts: encode array -> merge + verify -> probe array -> report.

Why plain generated scripts: users read them, adapt them (``--dry-run``) and resubmit one
array task by hand; the scheduler's own dependencies (``afterok``) chain the steps, so no
process of ours waits on a login node. Every script only runs ``estratos`` commands whose
arguments are quoted with :func:`shlex.quote`; every path is absolute, so a script works
from any folder and on any node that sees the same file system. The scripts call the Python
that wrote them (``PY=/abs/python``; ``"$PY" -m estratos ...``), never ``estratos`` by name:
a job's PATH (a venv not activated on the compute node) cannot change what runs. A job that
waits for others carries ``--kill-on-invalid-dep=yes``, so a failed step ends the chain
(``squeue`` empties) instead of leaving its dependents pending forever; the failed job's log
ends with how to resubmit (``bash submit.sh``: every step skips the work already done).

Per model (one cache each): ``<slug>.encode.sbatch`` (an array of ``encode_array`` tasks,
each running ``encode --shard "$SLURM_ARRAY_TASK_ID/N"``),
``<slug>.merge.sbatch`` (``cache merge`` of the shards, then ``cache verify``),
``<slug>.probe.sbatch`` (an array of ``probe_array`` tasks, each probing its share of the
grid into ``<slug>.shard-I-of-M.jsonl``); then one ``report.sbatch`` over every model's
results. A size of 1 is a plain job writing ``<slug>.h5`` / ``<slug>.jsonl`` directly.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from estratos.errors import OptionError
from estratos.options import DEFAULT_SEEDS_TEXT, is_local_model
from estratos.probe.estimators.registry import DEFAULT_CLASSIFIER
from estratos.vocab import DEFAULT_POOLING

#: the steps, in the order they run for each model (the report comes once, after all models)
STEPS: Tuple[str, ...] = ("encode", "merge", "probe", "report")
REPORT_SCRIPT = "report.sbatch"
SUBMIT_SCRIPT = "submit.sh"
LOG_DIR = "logs"
REPORT_DIR = "report"


@dataclass(frozen=True)
class JobScript:
    """One sbatch script of the pipeline.

    ``after``: names of the scripts that must end well (``afterok``) before this one starts;
    ``array``: the array size (None for a plain job).
    """

    name: str
    step: str
    model: Optional[str]
    text: str
    array: Optional[int] = None
    after: Tuple[str, ...] = ()


@dataclass(frozen=True)
class SlurmPlan:
    """Every script of one submission, in submission order, and the folder they belong in.

    Files the jobs write: ``<slug>.h5`` (the merged cache), ``<slug>.shard-I-of-N.h5``,
    ``<slug>.jsonl`` or ``<slug>.shard-I-of-M.jsonl`` (results), ``report/``, ``logs/``.
    """

    out: Path
    models: Dict[str, str]  # slug -> model as passed to `estratos encode --model`
    jobs: Tuple[JobScript, ...]

    def job(self, name: str) -> JobScript:
        """The script called ``name`` (e.g. ``"report.sbatch"``)."""
        for job in self.jobs:
            if job.name == name:
                return job
        raise KeyError(name)

    def path(self, name: str) -> Path:
        """Where the script ``name`` lives once written."""
        return self.out / name

    def submit_script(self) -> str:
        """A bash script that submits the scripts with the same ``afterok`` chain as
        :func:`estratos.slurm.submit`, for users who edit the scripts before submitting."""
        lines = ["#!/bin/bash",
                 "# Submits this folder's estratos pipeline: each script starts when those it "
                 "waits for",
                 "# have ended well (afterok). Prints the job ids and the command that shows "
                 "progress.",
                 "set -euo pipefail",
                 "submit() { sbatch --parsable \"$@\" | cut -d';' -f1; }"]
        var = {job.name: f"job{i + 1}" for i, job in enumerate(self.jobs)}
        for job in self.jobs:
            dep = ""
            if job.after:
                dep = " --dependency=afterok:" + ":".join(f"${var[a]}" for a in job.after)
            lines.append(f"{var[job.name]}=$(submit{dep} {_q(self.path(job.name))})")
        ids = ",".join(f"${var[job.name]}" for job in self.jobs)
        lines += [f'echo "submitted jobs {ids}"',
                  f'echo "progress: squeue --states=all --jobs={ids}"', ""]
        return "\n".join(lines)


def _q(value: os.PathLike | str) -> str:
    return shlex.quote(os.fspath(value))


def _directive_value(value: str, option: str = "--out") -> str:
    """A value for an ``#SBATCH`` line: sbatch splits those lines at blanks unless the value
    is in double quotes (and cannot hold a double quote at all)."""
    if '"' in value or "\n" in value or "\r" in value:
        raise OptionError(f"{option}: {value!r}: an sbatch directive cannot hold a double "
                          "quote or a line break")
    return f'"{value}"' if re.search(r"\s", value) else value


def _directive(arg: str) -> str:
    """``--sbatch-arg`` as an ``#SBATCH`` line: ``--comment=my run`` -> ``--comment="my run"``."""
    name, eq, value = arg.partition("=")
    if eq:
        return f"{name}={_directive_value(value, '--sbatch-arg')}"
    return _directive_value(arg, "--sbatch-arg")


def model_slugs(models: Sequence[str]) -> Dict[str, str]:
    """File-name stems for the models, in order: the last part of the id or folder, with
    anything but letters, digits, ``.``, ``_`` and ``-`` replaced; repeats get ``-2``, ``-3``."""
    slugs: Dict[str, str] = {}
    for model in models:
        base = re.sub(r"[^A-Za-z0-9._-]+", "-", model.rstrip("/").split("/")[-1])
        base = base.strip(".-") or "model"
        slug, n = base, 1
        while slug in slugs or slug == "report":
            n += 1
            slug = f"{base}-{n}"
        slugs[slug] = model
    return slugs


def _absolute(path: os.PathLike | str) -> Path:
    """Absolute without resolving symlinks (a user's /scratch link stays as they wrote it)."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def _model_argument(model: str) -> str:
    """A local model folder becomes absolute (jobs may start elsewhere); a hub id stays."""
    return str(_absolute(model)) if is_local_model(model) else model


def _task_arguments(tasks: str, task_files: Sequence[str],
                    data_dirs: Sequence[str]) -> List[Tuple[str, str]]:
    """``--tasks``, ``--task-file`` (absolute) and ``--data-dir`` (absolute folders) for the
    jobs, after checking that every task finds its data (the login node sees the cluster's
    file system: a typo fails now, not in a job)."""
    from estratos.tasks.selection import select_specs

    selection = select_specs(tasks, task_files, data_dirs)
    dirs = selection.data_dirs
    for spec in selection.specs:
        if not spec.source:  # a custom task's folder comes with its task file
            dirs.for_suite(spec.suite)
    values = [] if dirs.default is None else [str(_absolute(dirs.default))]
    values += [f"{suite}={_absolute(path)}" for suite, path in sorted(dirs.by_suite.items())]
    options = [("--tasks", tasks)] if tasks and str(tasks).strip() else []
    options += [("--task-file", str(_absolute(path))) for path in task_files]
    return options + [("--data-dir", v) for v in values]


def _check_options(models: Sequence[str], tasks: str, task_files: Sequence[str],
                   encode_array: int, probe_array: int,
                   gpus_per_task: int, cpus_per_task: Optional[int],
                   sbatch_args: Sequence[str]) -> None:
    """The scheduling options (the encode and probe options are checked by
    :meth:`~estratos.encode.config.EncodeConfig.build` and
    :meth:`~estratos.probe.config.ProbeConfig.build`)."""
    from estratos.tasks.selection import NO_TASKS

    if not models:
        raise OptionError("MODEL: give at least one model (Hugging Face id or local folder)")
    if (not tasks or not str(tasks).strip()) and not task_files:
        raise OptionError(NO_TASKS)
    for option, value in (("--encode-array", encode_array), ("--probe-array", probe_array)):
        if isinstance(value, bool) or int(value) < 1:
            raise OptionError(f"{option}: the array needs at least 1 task, got {value}")
    if int(gpus_per_task) < 0:
        raise OptionError(f"--gpus-per-task: must be >= 0, got {gpus_per_task}")
    if cpus_per_task is not None and int(cpus_per_task) < 1:
        raise OptionError(f"--cpus-per-task: must be >= 1, got {cpus_per_task}")
    for arg in sbatch_args:
        if not arg.startswith("-"):
            raise OptionError(f"--sbatch-arg: {arg!r} is not one sbatch option "
                              "(e.g. --account=ACCOUNT)")
        _directive(arg)


class _Shell(str):
    """A value written as is (already quoted for bash), e.g. ``"$SLURM_ARRAY_TASK_ID/4"``."""


def _shard_option(count: int) -> List[Tuple[str, str]]:
    """``--shard "$SLURM_ARRAY_TASK_ID/N"``: N is written down (not read from
    ``SLURM_ARRAY_TASK_COUNT``) so that ``sbatch --array=K`` reruns exactly shard K."""
    return [("--shard", _Shell(f'"$SLURM_ARRAY_TASK_ID/{count}"'))] if count > 1 else []


#: how every script calls estratos: the interpreter in ``$PY`` (set in the header), by module
PROGRAM = '"$PY" -m estratos'
#: the option that makes a job whose dependency failed end (cancelled) rather than wait forever
KILL_ON_INVALID_DEP = "--kill-on-invalid-dep=yes"


def _command(words: Sequence[str], options: Sequence[Tuple[str, Optional[str]]],
             positional: Sequence[str] = ()) -> str:
    """``"$PY" -m estratos <words>`` with one argument (already quoted), ``--option value``
    (quoted here) or a ``--flag`` (value None) per line."""
    head = " ".join([PROGRAM, *map(_q, words)])
    parts = [head] + [f"    {arg}" for arg in positional]
    parts += [f"    {opt}" if value is None else
              f"    {opt} {value if isinstance(value, _Shell) else _q(value)}"
              for opt, value in options]
    return " \\\n".join(parts)


@dataclass(frozen=True)
class _Pipeline:
    """What every script of one submission shares (resources, task options, the Python)."""

    out: Path
    python: str
    task_options: Tuple[Tuple[str, str], ...]
    encode_array: int
    probe_array: int
    probe_options: Tuple[Tuple[str, Optional[str]], ...]
    encode_options: Tuple[Tuple[str, Optional[str]], ...]
    partition: Optional[str]
    time: Optional[str]
    sbatch_args: Tuple[str, ...]
    gpus_per_task: int
    cpus_per_task: Optional[int]

    def header(self, script: str, job_name: str, comments: Sequence[str], array: int = 1,
               gpus: int = 0, cpus: Optional[int] = None, waits: bool = True) -> List[str]:
        """The shebang, comments, ``#SBATCH`` lines, the shell settings and the failure
        message of the script called ``script``; ``waits``: it has dependencies."""
        # '%' in the folder would be read as a file-name pattern: '%%' is a literal '%'
        log = (str(self.out / LOG_DIR).replace("%", "%%") + "/"
               + ("%x-%A_%a.out" if array > 1 else "%x-%j.out"))
        lines = ["#!/bin/bash"]
        for comment in comments:
            if comment.startswith(" "):  # a command to copy: never wrapped
                lines.append(f"# {comment}")
                continue
            lines += textwrap.wrap(comment, 94, initial_indent="# ", subsequent_indent="# ",
                                   break_on_hyphens=False, break_long_words=False)
        lines.append(f"#SBATCH --job-name={job_name}")
        if array > 1:
            lines.append(f"#SBATCH --array=0-{array - 1}")
        lines.append(f"#SBATCH --output={_directive_value(log)}")
        if self.partition:
            lines.append(f"#SBATCH --partition={self.partition}")
        if gpus:
            lines.append(f"#SBATCH --gres=gpu:{gpus}")
        if cpus:
            lines.append(f"#SBATCH --cpus-per-task={cpus}")
        if self.time:
            lines.append(f"#SBATCH --time={self.time}")
        if waits:
            lines.append(f"#SBATCH {KILL_ON_INVALID_DEP}")
        lines += [f"#SBATCH {_directive(arg)}" for arg in self.sbatch_args]
        # HDF5's file locks fail on many network file systems; estratos never shares a
        # file between writers (each array task writes its own shard)
        lines += ["set -euo pipefail", "export HDF5_USE_FILE_LOCKING=FALSE",
                  f"PY={_q(self.python)}  # the Python that wrote this script (PATH plays no part)"]
        return lines + _failure_message(script, array > 1, self.out / SUBMIT_SCRIPT)

    def command(self, words: Sequence[str], options: Sequence[Tuple[str, Optional[str]]] = (),
                positional: Sequence[str] = ()) -> str:
        return _command(words, options, positional)

    def results(self, slug: str) -> str:
        """The results files of one model, as the report's (globbing) bash argument."""
        if self.probe_array > 1:
            return f"{_q(self.out)}/{slug}.shard-*-of-{self.probe_array}.jsonl"
        return _q(self.out / f"{slug}.jsonl")


def _failure_message(script: str, array: bool, submit_sh: Path) -> List[str]:
    """Bash lines that, when the script ends with a non-zero status, say so in its log and how
    to go on: the jobs after it are cancelled (``--kill-on-invalid-dep``), and ``submit.sh``
    resubmits the chain, every step skipping the work already done (so the failed task
    resumes). The command is one single-quoted word: no path in it is expanded."""
    who = ("array task $SLURM_ARRAY_TASK_ID of job $SLURM_ARRAY_JOB_ID" if array
           else "job $SLURM_JOB_ID")
    return (["failed() {",
             f'  echo "estratos: {who} ({script}) failed with exit code $1;'
             ' the jobs waiting for it are cancelled." >&2',
             "  echo 'Fix the cause, then resubmit the chain (every step skips the work "
             "already done):' >&2",
             f"  echo {_q(f'    bash {_q(submit_sh)}')} >&2",
             "}", """trap 'rc=$?; if [ "$rc" != 0 ]; then failed "$rc"; fi' EXIT"""])


def _rerun_comment(p: _Pipeline, name: str, n: int, what: str) -> List[str]:
    if n > 1:
        return [f"Rerun array task K alone ({what}):",
                f"    sbatch --array=K {_q(p.out / name)}"]
    return [f"A rerun {what}."]


def _encode_job(p: _Pipeline, slug: str, model: str) -> JobScript:
    cache = p.out / f"{slug}.h5"
    n = p.encode_array
    lines = p.header(f"{slug}.encode.sbatch", f"estratos-encode-{slug}",
                     [f"estratos: encode {model} into {cache.name}"
                      + (f", shard I of {n} in array task I." if n > 1 else ".")]
                     + _rerun_comment(p, f"{slug}.encode.sbatch", n,
                                      "it resumes where it stopped"),
                     n, p.gpus_per_task, p.cpus_per_task, waits=False)
    threads = [("--threads", str(p.cpus_per_task))] if p.cpus_per_task else []
    lines.append(p.command(["encode"], [("--model", model), *p.task_options,
                                        *p.encode_options, *threads,
                                        *_shard_option(n), ("--out", str(cache))]))
    return JobScript(f"{slug}.encode.sbatch", "encode", model, "\n".join(lines) + "\n",
                     n if n > 1 else None)


def _merge_job(p: _Pipeline, slug: str, model: str) -> JobScript:
    cache = p.out / f"{slug}.h5"
    n = p.encode_array
    if n > 1:
        lines = p.header(f"{slug}.merge.sbatch", f"estratos-merge-{slug}",
                         [f"estratos: merge the {n} shards of {cache.name}, then verify it.",
                          f"Merged once: a rerun keeps {cache.name} and only verifies it."])
        shards = f"{_q(p.out)}/{slug}.shard-*-of-{n}.h5"
        lines += [f"if [ ! -e {_q(cache)} ]; then",
                  "  " + " ".join([PROGRAM, "cache", "merge", "--out", _q(cache)])
                  + f" \\\n      {shards}",
                  "fi"]
    else:
        lines = p.header(f"{slug}.merge.sbatch", f"estratos-merge-{slug}",
                         [f"estratos: verify {cache.name} (one encode job: nothing to merge)."])
    lines.append(p.command(["cache", "verify", str(cache)], p.task_options))
    return JobScript(f"{slug}.merge.sbatch", "merge", model, "\n".join(lines) + "\n", None,
                     (f"{slug}.encode.sbatch",))


def _probe_job(p: _Pipeline, slug: str, model: str) -> JobScript:
    cache, results = p.out / f"{slug}.h5", p.out / f"{slug}.jsonl"
    n = p.probe_array
    target = f"{slug}.shard-I-of-{n}.jsonl, share I of the grid in array task I." if n > 1 \
        else f"{results.name}."
    lines = p.header(f"{slug}.probe.sbatch", f"estratos-probe-{slug}",
                     [f"estratos: probe {cache.name} into {target}"]
                     + _rerun_comment(p, f"{slug}.probe.sbatch", n,
                                      "it skips the cells already done"),
                     n, 0, p.cpus_per_task)
    jobs = [("--jobs", str(p.cpus_per_task))] if p.cpus_per_task else []
    lines.append(p.command(["probe"], [("--cache", str(cache)), *p.task_options,
                                       *p.probe_options, *jobs, *_shard_option(n),
                                       ("--out", str(results))]))
    return JobScript(f"{slug}.probe.sbatch", "probe", model, "\n".join(lines) + "\n",
                     n if n > 1 else None, (f"{slug}.merge.sbatch",))


def _report_job(p: _Pipeline, slugs: Sequence[str]) -> JobScript:
    what = f"one report comparing {len(slugs)} models" if len(slugs) > 1 else "the report"
    lines = p.header(REPORT_SCRIPT, "estratos-report", [f"estratos: {what}, in {REPORT_DIR}/."])
    lines.append(p.command(["report"], [("--out", str(p.out / REPORT_DIR))],
                           positional=[p.results(slug) for slug in slugs]))
    return JobScript(REPORT_SCRIPT, "report", None, "\n".join(lines) + "\n", None,
                     tuple(f"{slug}.probe.sbatch" for slug in slugs))


def plan_pipeline(models: Sequence[str], tasks: str, data_dirs: Sequence[str],
                  out: os.PathLike | str, *, task_files: Sequence[str] = (),
                  encode_array: int = 1, probe_array: int = 1,
                  layers: str = "all", seeds: str = DEFAULT_SEEDS_TEXT,
                  pooling: Optional[str] = DEFAULT_POOLING,
                  classifier: str = DEFAULT_CLASSIFIER, features: Optional[str] = None,
                  control: Optional[str] = None, control_l2: Optional[str] = None,
                  mdl: bool = False, device: str = "auto",
                  encode: Optional[Mapping[str, Any]] = None,
                  partition: Optional[str] = None,
                  gpus_per_task: int = 0, cpus_per_task: Optional[int] = None,
                  time: Optional[str] = None, sbatch_args: Sequence[str] = (),
                  python: Optional[str] = None) -> SlurmPlan:
    """The job scripts for ``models`` on ``tasks`` (nothing is written or submitted).

    ``tasks``/``task_files``/``data_dirs``/``layers``/``seeds``/``pooling``/``classifier``/
    ``features``/``control``/``control_l2``/``mdl``/``device`` are the forms ``estratos
    probe`` takes
    (``pooling`` None: each cache's first, as probe does; the probe jobs get them through
    :meth:`ProbeConfig.to_argv`); ``encode``: the options of ``estratos encode`` that say
    what the caches hold, as :meth:`EncodeConfig.build
    <estratos.encode.config.EncodeConfig.build>` keywords (``dtype``, ``max_length``,
    ``states``, ``prompt``, ``random_init``, ...; the encode jobs get them through
    :meth:`EncodeConfig.to_options`; their device, shard and threads come from the job).
    ``gpus_per_task`` and ``cpus_per_task`` go to the
    encode array (``--gres=gpu:G``: each array task is one task; ``encode --threads``);
    ``cpus_per_task`` also to the probe array (``probe --jobs``). ``partition``, ``time`` and
    ``sbatch_args`` (extra ``#SBATCH`` options, e.g. ``--account=X``) go to every job.
    ``python``: the interpreter the jobs run ``-m estratos`` with (default: this one,
    ``sys.executable``, kept as written: a venv's ``bin/python`` link must not be resolved).
    Raises :class:`~estratos.errors.OptionError` (or the task errors of
    :func:`estratos.tasks.selection.select_specs`) before anything is written.
    """
    models = [str(m) for m in models]
    python = sys.executable if python is None else str(python)
    if not python or not os.path.isabs(python):
        raise OptionError(f"python: {python!r} is not an absolute path to an interpreter "
                          "(the jobs must not depend on PATH)")
    task_files = [str(p) for p in task_files]
    _check_options(models, tasks, task_files, encode_array, probe_array, gpus_per_task,
                   cpus_per_task, sbatch_args)
    from estratos.encode.config import EncodeConfig
    from estratos.probe.config import ProbeConfig

    encode_config = EncodeConfig.build(model=models[0] if models else None,
                                       **dict(encode or {}))
    probe = ProbeConfig.build(layers=layers, pooling=pooling, seeds=seeds,
                              classifier=classifier, features=features, control=control,
                              control_l2=control_l2, mdl=mdl, device=device, jobs=1)
    words = probe.to_argv()
    probe_options = []
    for i, word in enumerate(words):  # (option, value) pairs; a flag has the value None
        if word.startswith("--"):
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") \
                else None
            probe_options.append((word, value))
    encode_options = encode_config.to_options()[1:]  # the model is each job's own
    task_options = _task_arguments(tasks, task_files, data_dirs)
    p = _Pipeline(out=_absolute(out), python=python, task_options=tuple(task_options),
                  encode_array=int(encode_array), probe_array=int(probe_array),
                  probe_options=tuple(probe_options), encode_options=tuple(encode_options),
                  partition=partition, time=time, sbatch_args=tuple(sbatch_args),
                  gpus_per_task=int(gpus_per_task),
                  cpus_per_task=int(cpus_per_task) if cpus_per_task else None)
    slugs = {slug: _model_argument(model) for slug, model in model_slugs(models).items()}
    jobs: List[JobScript] = []
    for slug, model in slugs.items():
        jobs += [_encode_job(p, slug, model), _merge_job(p, slug, model),
                 _probe_job(p, slug, model)]
    jobs.append(_report_job(p, list(slugs)))
    return SlurmPlan(p.out, slugs, tuple(jobs))
