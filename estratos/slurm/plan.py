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
from typing import Any, Dict, List, Optional, Sequence, Tuple

from estratos.clitypes import integer
from estratos.commandline import Command, ShellText, task_options
from estratos.encode.config import EncodeConfig
from estratos.errors import OptionError
from estratos.model_source import is_local_model
from estratos.optiontable import OptionPair, Role, check_fields, option
from estratos.probe.config import ProbeConfig
from estratos.vocab import ENCODER_POOLING

#: the steps, in the order they run for each model (the report comes once, after all models)
#: ``estratos slurm`` takes encode's options under these flags where probe has one of the
#: same name (the probe's keeps the plain flag), and passes them to the command line under
#: this prefix
SLURM_ENCODE_FLAGS = {"poolings": "--encode-pooling", "device": "--encode-device"}
SLURM_ENCODE_PREFIX = "encode_"
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


def _q(value: os.PathLike[str] | str) -> str:
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


def _absolute(path: os.PathLike[str] | str) -> Path:
    """Absolute without resolving symlinks (a user's /scratch link stays as they wrote it)."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def _model_argument(model: str) -> str:
    """A local model folder becomes absolute (jobs may start elsewhere); a hub id stays."""
    return str(_absolute(model)) if is_local_model(model) else model


def _task_arguments(tasks: str, task_files: Sequence[str],
                    data_dirs: Sequence[str]) -> List[OptionPair]:
    """``--tasks``, ``--task-file`` (absolute) and ``--data-dir`` (absolute folders) for the
    jobs, after checking that every task finds its data (the login node sees the cluster's
    file system: a typo fails now, not in a job)."""
    from estratos.tasks.selection import NO_TASKS, select_specs

    if (not tasks or not str(tasks).strip()) and not task_files:
        raise OptionError(NO_TASKS)
    selection = select_specs(tasks, task_files, data_dirs)
    dirs = selection.data_dirs
    for spec in selection.specs:
        if not spec.source:  # a custom task's folder comes with its task file
            dirs.for_suite(spec.suite)
    values = [] if dirs.default is None else [str(_absolute(dirs.default))]
    values += [f"{suite}={_absolute(path)}" for suite, path in sorted(dirs.by_suite.items())]
    return task_options(tasks, [str(_absolute(path)) for path in task_files], values)


def _at_least(flag: str, value: Any, minimum: int, what: str = "") -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(value)
    except (TypeError, ValueError):
        raise OptionError(f"{flag}: expected an integer, got {value!r}") from None
    if number < minimum:
        if what:
            raise OptionError(f"{flag}: {what} at least {minimum} task, got {value}")
        raise OptionError(f"{flag}: must be >= {minimum}, got {value}")
    return number


def _sbatch_args(args: Sequence[str]) -> Tuple[str, ...]:
    for arg in args:
        if not arg.startswith("-"):
            raise OptionError(f"--sbatch-arg: {arg!r} is not one sbatch option "
                              "(e.g. --account=ACCOUNT)")
        _directive(arg)
    return tuple(args)


@dataclass(frozen=True)
class Resources:
    """What the scheduler gives the jobs, each field one option of ``estratos slurm``
    (:mod:`estratos.optiontable`): the array sizes, the partition, GPUs and CPUs per array
    task, the time limit and extra ``#SBATCH`` options."""

    encode_array: int = option(
        1, "--encode-array", "Encode array tasks per model (one shard of the sentences "
        "each).", role=Role.PLACEMENT, click_type=integer,
        check=lambda v: _at_least("--encode-array", v, 1, "the array needs"))
    probe_array: int = option(
        1, "--probe-array", "Probe array tasks per model (one share of the grid each).",
        role=Role.PLACEMENT, click_type=integer,
        check=lambda v: _at_least("--probe-array", v, 1, "the array needs"))
    partition: Optional[str] = option(
        None, "--partition", "sbatch --partition for every job.", role=Role.PLACEMENT)
    gpus_per_task: int = option(
        0, "--gpus-per-task", "GPUs per encode array task (--gres=gpu:G).",
        role=Role.PLACEMENT, click_type=integer,
        check=lambda v: _at_least("--gpus-per-task", v, 0))
    cpus_per_task: Optional[int] = option(
        None, "--cpus-per-task", "CPUs per encode and probe array task (encode --threads, "
        "probe --jobs).", role=Role.PLACEMENT,
        check=lambda v: _at_least("--cpus-per-task", v, 1), click_type=integer)
    time: Optional[str] = option(
        None, "--time", "sbatch --time for every job (e.g. 02:00:00).", role=Role.PLACEMENT,
        metavar="TIME")
    sbatch_args: Tuple[str, ...] = option(
        (), "--sbatch-arg", "Extra sbatch option for every job, e.g. "
        "--sbatch-arg=--account=X (repeatable).", role=Role.PLACEMENT, multiple=True,
        metavar="OPTION", check=_sbatch_args)

    @classmethod
    def build(cls, **given: Any) -> "Resources":
        """Check every option given by field name (an :class:`OptionError` names the first
        bad one) and return the resources."""
        return cls(**check_fields(cls, given))


def _shard_option(count: int) -> List[OptionPair]:
    """``--shard "$SLURM_ARRAY_TASK_ID/N"``: N is written down (not read from
    ``SLURM_ARRAY_TASK_COUNT``) so that ``sbatch --array=K`` reruns exactly shard K."""
    return [("--shard", ShellText(f'"$SLURM_ARRAY_TASK_ID/{count}"'))] if count > 1 else []


#: how every script calls estratos: the interpreter in ``$PY`` (set in the header), by module
PROGRAM = '"$PY" -m estratos'
#: the option that makes a job whose dependency failed end (cancelled) rather than wait forever
KILL_ON_INVALID_DEP = "--kill-on-invalid-dep=yes"


def _shards(path: Path, count: int) -> ShellText:
    """The glob of a file's ``count`` shards as a bash word (the folder quoted, the pattern
    left to bash): :func:`estratos.cache.schema.shard_path`'s rule."""
    from estratos.cache.schema import shard_path

    pattern = shard_path(path, "*", count)
    return ShellText(f"{_q(pattern.parent)}/{pattern.name}")


@dataclass(frozen=True)
class _Pipeline:
    """What every script of one submission shares (resources, task options, the Python)."""

    out: Path
    python: str
    task_options: Tuple[OptionPair, ...]
    resources: Resources
    probe: ProbeConfig
    encode: EncodeConfig

    @property
    def encode_array(self) -> int:
        return self.resources.encode_array

    @property
    def probe_array(self) -> int:
        return self.resources.probe_array

    @property
    def cpus_per_task(self) -> Optional[int]:
        return self.resources.cpus_per_task

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
        if self.resources.partition:
            lines.append(f"#SBATCH --partition={self.resources.partition}")
        if gpus:
            lines.append(f"#SBATCH --gres=gpu:{gpus}")
        if cpus:
            lines.append(f"#SBATCH --cpus-per-task={cpus}")
        if self.resources.time:
            lines.append(f"#SBATCH --time={self.resources.time}")
        if waits:
            lines.append(f"#SBATCH {KILL_ON_INVALID_DEP}")
        lines += [f"#SBATCH {_directive(arg)}" for arg in self.resources.sbatch_args]
        # HDF5's file locks fail on many network file systems; estratos never shares a
        # file between writers (each array task writes its own shard)
        lines += ["set -euo pipefail", "export HDF5_USE_FILE_LOCKING=FALSE",
                  f"PY={_q(self.python)}  # the Python that wrote this script (PATH plays no part)"]
        return lines + _failure_message(script, array > 1, self.out / SUBMIT_SCRIPT)

    def command(self, words: Sequence[str], *options: Sequence[OptionPair],
                positional: Sequence[str] = ()) -> str:
        return Command.of(words, *options, positional=positional).script(PROGRAM)

    def results(self, slug: str) -> ShellText:
        """The results files of one model, as the report's (globbing) bash argument."""
        if self.probe_array > 1:
            return _shards(self.out / f"{slug}.jsonl", self.probe_array)
        return ShellText(_q(self.out / f"{slug}.jsonl"))


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
                     n, p.resources.gpus_per_task, p.cpus_per_task, waits=False)
    threads = [("--threads", str(p.cpus_per_task))] if p.cpus_per_task else []
    source, *options = _encode_for(p.encode, model).to_options()
    lines.append(p.command(["encode"], [source], p.task_options, options, threads,
                           _shard_option(n), [("--out", str(cache))]))
    return JobScript(f"{slug}.encode.sbatch", "encode", model, "\n".join(lines) + "\n",
                     n if n > 1 else None)


def _encode_for(encode: EncodeConfig, model: str) -> EncodeConfig:
    """The encode configuration of one model's jobs: the shared one with its model (or its
    batcher) in place."""
    if encode.encoder is not None:
        return encode.replace(encoder=model)
    return encode.replace(model=model)


def _merge_job(p: _Pipeline, slug: str, model: str) -> JobScript:
    cache = p.out / f"{slug}.h5"
    n = p.encode_array
    if n > 1:
        lines = p.header(f"{slug}.merge.sbatch", f"estratos-merge-{slug}",
                         [f"estratos: merge the {n} shards of {cache.name}, then verify it.",
                          f"Merged once: a rerun keeps {cache.name} and only verifies it."])
        merge = p.command(["cache", "merge"], [("--out", str(cache))],
                          positional=[_shards(cache, n)])
        lines += [f"if [ ! -e {_q(cache)} ]; then",
                  textwrap.indent(merge, "  "),
                  "fi"]
    else:
        lines = p.header(f"{slug}.merge.sbatch", f"estratos-merge-{slug}",
                         [f"estratos: verify {cache.name} (one encode job: nothing to merge)."])
    lines.append(p.command(["cache", "verify"], p.task_options, positional=[str(cache)]))
    return JobScript(f"{slug}.merge.sbatch", "merge", model, "\n".join(lines) + "\n", None,
                     (f"{slug}.encode.sbatch",))


def _probe_job(p: _Pipeline, slug: str, model: str) -> JobScript:
    cache, results = p.out / f"{slug}.h5", p.out / f"{slug}.jsonl"
    n = p.probe_array
    target = (f"{_shard_name(results, 'I', n)}, share I of the grid in array task I."
              if n > 1 else f"{results.name}.")
    lines = p.header(f"{slug}.probe.sbatch", f"estratos-probe-{slug}",
                     [f"estratos: probe {cache.name} into {target}"]
                     + _rerun_comment(p, f"{slug}.probe.sbatch", n,
                                      "it skips the cells already done"),
                     n, 0, p.cpus_per_task)
    jobs = [("--jobs", str(p.cpus_per_task))] if p.cpus_per_task else []
    lines.append(p.command(["probe"], [("--cache", str(cache))], p.task_options,
                           p.probe.to_options(), [("--expect-model", model)], jobs,
                           _shard_option(n), [("--out", str(results))]))
    return JobScript(f"{slug}.probe.sbatch", "probe", model, "\n".join(lines) + "\n",
                     n if n > 1 else None, (f"{slug}.merge.sbatch",))


def _shard_name(path: Path, index: str, count: int) -> str:
    from estratos.cache.schema import shard_path

    return shard_path(path, index, count).name


def _report_job(p: _Pipeline, slugs: Sequence[str]) -> JobScript:
    what = f"one report comparing {len(slugs)} models" if len(slugs) > 1 else "the report"
    lines = p.header(REPORT_SCRIPT, "estratos-report", [f"estratos: {what}, in {REPORT_DIR}/."])
    lines.append(p.command(["report"], [("--out", str(p.out / REPORT_DIR))],
                           positional=[p.results(slug) for slug in slugs]))
    return JobScript(REPORT_SCRIPT, "report", None, "\n".join(lines) + "\n", None,
                     tuple(f"{slug}.probe.sbatch" for slug in slugs))


def plan_pipeline(models: Sequence[str], tasks: str, data_dirs: Sequence[str],
                  out: os.PathLike[str] | str, *, encode: Optional[EncodeConfig] = None,
                  probe: Optional[ProbeConfig] = None, resources: Optional[Resources] = None,
                  task_files: Sequence[str] = (), python: Optional[str] = None) -> SlurmPlan:
    """The job scripts for ``models`` on ``tasks`` (nothing is written or submitted).

    ``tasks``/``task_files``/``data_dirs`` are the forms ``estratos probe`` takes;
    ``encode``: what the caches hold (:class:`~estratos.encode.config.EncodeConfig`, None:
    the defaults; its ``model`` is replaced by each model's, and with a batcher
    (``encoder``) ``models`` are batchers; each encode job gets
    :meth:`EncodeConfig.to_options`, its threads and shard from the job); ``probe``: the
    probe jobs' :class:`~estratos.probe.config.ProbeConfig` (None: the defaults;
    :meth:`ProbeConfig.to_options`; ``--expect-model``, ``--jobs`` and ``--shard`` from the
    job). A probe ``pooling`` that the encode jobs would not store is refused; with no
    ``--pooling`` asked of encode, they store the probe's alone. ``resources``
    (:class:`Resources`): the arrays, ``gpus_per_task`` and ``cpus_per_task`` for the encode
    array (``--gres=gpu:G``; ``encode --threads``), ``cpus_per_task`` also for the probe
    array (``probe --jobs``), ``partition``, ``time`` and ``sbatch_args`` for every job.
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
    if not models:
        raise OptionError("MODEL: give at least one model (Hugging Face id or local folder), "
                          "or --encoder MODULE:FUNCTION")
    task_files = [str(p) for p in task_files]
    task_words = _task_arguments(tasks, task_files, data_dirs)
    probe = probe or ProbeConfig.build(jobs=1)
    encode = _stores_probe_pooling(encode or EncodeConfig(), probe.pooling)
    p = _Pipeline(out=_absolute(out), python=python, task_options=tuple(task_words),
                  resources=resources or Resources(), probe=probe, encode=encode)
    slugs = {slug: (model if encode.encoder is not None else _model_argument(model))
             for slug, model in model_slugs(models).items()}
    jobs: List[JobScript] = []
    for slug, model in slugs.items():
        jobs += [_encode_job(p, slug, model), _merge_job(p, slug, model),
                 _probe_job(p, slug, model)]
    jobs.append(_report_job(p, list(slugs)))
    return SlurmPlan(p.out, slugs, tuple(jobs))


def _stores_probe_pooling(encode: EncodeConfig, pooling: Optional[str]) -> EncodeConfig:
    """The encode configuration whose caches hold the vectors the probe jobs read: the
    probe's ``--pooling`` stored alone when encode was asked for none, refused when encode
    was asked for others (a probe job that would fail on the cluster, after the encode)."""
    if pooling is None:
        return encode
    if encode.encoder is not None:
        if pooling != ENCODER_POOLING:
            raise OptionError(f"--pooling: {pooling!r}: an --encoder function gives one vector "
                              f"kind, stored as {ENCODER_POOLING!r}")
        return encode
    if encode.poolings is None:
        return encode.replace(poolings=(pooling,))
    if pooling not in encode.poolings:
        raise OptionError(f"--pooling: the probe jobs read {pooling!r}, which the encode jobs "
                          f"would not store (--encode-pooling {' '.join(encode.poolings)}); "
                          "add it to --encode-pooling")
    return encode


