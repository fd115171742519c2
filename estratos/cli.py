"""The ``estratos`` command line: parses options and calls library code, nothing else.

Every command is a thin wrapper over a documented Python function (named in its help), so
anything the CLI does can be scripted. User errors (``EstratosError``) become one line on
stderr and a non-zero exit code; nothing half-written is left behind by the library.
"""

from __future__ import annotations

import logging
import re
from typing import Callable, List, Optional, Sequence

import click

from estratos import __version__
from estratos.encode.config import EncodeConfig
from estratos.errors import EstratosError, Interrupted, OptionError
from estratos.options import DEFAULT_SEEDS_TEXT, parse_seeds
from estratos.optiontable import Role, click_options, pick
from estratos.probe.config import BaselineConfig, ProbeConfig
from estratos.results.record import CellKey
from estratos.similarity.config import SIMILARITY_ONLY, MapConfig
from estratos.slurm.plan import SLURM_ENCODE_FLAGS, SLURM_ENCODE_PREFIX, Resources
from estratos.vocab import (
    BOOTSTRAP_SEED,
    DEFAULT_SEED,
    DEMO_SEEDS,
    DOWNLOADABLE,
    SYNTHETIC_N_PER_TASK,
)


class _UserError(click.ClickException):
    """An :class:`EstratosError` shown as ``Error: message`` with the error's exit code."""

    def __init__(self, exc: EstratosError) -> None:
        super().__init__(exc.cli_text())
        # click declares exit_code on the class and reads it from the instance: each error
        # carries its own code
        self.exit_code = exc.exit_code  # type: ignore[misc]


#: the verbosity options, accepted before or after the subcommand
_VERBOSITY = re.compile(r"-v+|-q+|--verbose|--quiet")


class _Group(click.Group):
    """A click group that reports user errors without a traceback (also under CliRunner),
    and takes ``-v``/``-q`` anywhere on the line (``estratos probe ... -v`` as well as
    ``estratos -v probe ...``; the words after ``--`` are left alone)."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        if ctx.parent is None:
            cut = args.index("--") if "--" in args else len(args)
            head = args[:cut]
            moved = [a for a in head if _VERBOSITY.fullmatch(a)]
            args = moved + [a for a in head if not _VERBOSITY.fullmatch(a)] + args[cut:]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except EstratosError as exc:
            raise _UserError(exc) from exc
        except KeyboardInterrupt as exc:
            # Ctrl-C outside a run's own handler (while it starts or finishes): every file
            # estratos writes is whole at any instant, so a rerun resumes from what is there
            raise _UserError(Interrupted(
                "interrupted (Ctrl-C); every file written so far is whole: rerun the same "
                "command to resume")) from exc


def _task_file_option(what: str = "A custom task spec (repeatable).") -> Callable:
    return click.option("--task-file", "task_files", multiple=True, metavar="TASK.toml",
                        help=what)


def _data_dir_option(what: str = "Where task data lives") -> Callable:
    return click.option("--data-dir", "data_dirs", multiple=True, metavar="[SUITE=]DIR",
                        help=f"{what}: DIR or SUITE=DIR; repeatable [default: $ESTRATOS_DATA].")


def _seeds_option(default: str = DEFAULT_SEEDS_TEXT,
                  what: str = "Comma-separated seeds.") -> Callable:
    return click.option("--seeds", default=default, show_default=True, help=what)


#: the roles of the options ``slurm`` takes from each stage (placement is each job's own)
_JOB_ROLES = (Role.IDENTITY, Role.EXECUTION)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="estratos")
@click.option("-v", "--verbose", count=True,
              help="More log output (-v info, -vv debug); before or after the command.")
@click.option("-q", "--quiet", count=True,
              help="Errors only: no warnings, no progress lines; before or after the command.")
def cli(verbose: int, quiet: int) -> None:
    """What each layer of a sentence encoder knows: encode once, probe every layer."""
    if verbose and quiet:
        raise click.UsageError("-v/--verbose and -q/--quiet exclude each other")
    level = (logging.ERROR if quiet else logging.WARNING if verbose == 0
             else logging.INFO if verbose == 1 else logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # this invocation's choice, also where logging was configured before (an embedding
    # program, an earlier call in one process); without -v/-q the root's level rules
    logging.getLogger("estratos").setLevel(level if verbose or quiet else logging.NOTSET)


@cli.group("tasks")
def tasks_group() -> None:
    """List, inspect, check, build and download benchmark tasks."""


@cli.group("cache")
def cache_group() -> None:
    """Inspect, verify and merge embedding caches."""


# ---- encode (stage one) ------------------------------------------------------------------
@cli.command("encode")
@click.option("--out", required=True, metavar="CACHE.h5", help="Cache file to create or extend.")
@click.option("--sentences", "sentences_file", metavar="FILE",
              help="UTF-8 text file, one sentence per line.")
@click.option("--tasks", metavar="IDS", help="Encode the sentences of these tasks.")
@_task_file_option("Also encode this custom task's sentences (repeatable).")
@_data_dir_option("Where task data lives (with --tasks)")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar [default: when stderr is a terminal].")
@click_options(EncodeConfig)
def encode_command(out, sentences_file, tasks, task_files, data_dirs, progress,
                   **options) -> None:
    """Encode sentences once into an HDF5 cache (estratos.encode.encode_sentences)."""
    config = EncodeConfig.build(**options)
    from estratos.encode.inputs import gather_sentences_meanwhile
    from estratos.encode.models.warmup import warmup_steps

    # the inputs first (a wrong --data-dir is named before a wrong --model); task data is read
    # in a helper process while this one imports the model's code
    sentences = gather_sentences_meanwhile(warmup_steps(config.model), sentences_file, tasks,
                                           data_dirs, task_files)
    config.check_model()
    from estratos.encode import encode_sentences  # torch and transformers: only now

    summary = encode_sentences(sentences, config, out, progress=progress,
                               notify=lambda line: click.echo(line, err=True))
    click.echo(summary.describe())


# ---- cache subcommands -------------------------------------------------------------------
@cache_group.command("info")
@click.argument("cache")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of key: value lines.")
def cache_info_command(cache: str, as_json: bool) -> None:
    """Attributes, rows, layers, dims and size of a cache (estratos.cache.cache_info)."""
    import json

    from estratos.cache import cache_info, format_info

    info = cache_info(cache)
    click.echo(json.dumps(info, indent=2, sort_keys=True) if as_json else format_info(info))


@cache_group.command("verify")
@click.argument("cache")
@click.option("--sentences", "sentences_file", metavar="FILE",
              help="Also check that these sentences (one a line) are present.")
@click.option("--tasks", metavar="IDS", help="Also check that these tasks' sentences are present.")
@_task_file_option("Also check this custom task's sentences (repeatable).")
@_data_dir_option("Where task data lives (with --tasks)")
@click.pass_context
def cache_verify_command(ctx: click.Context, cache: str, sentences_file, tasks, task_files,
                         data_dirs) -> None:
    """Check completeness, checksums, NaNs and required sentences; exit 1 if anything is wrong
    (estratos.cache.verify_cache)."""
    from estratos.cache import verify_cache
    from estratos.encode.inputs import gather_sentences

    needed = None
    if sentences_file is not None or tasks is not None or data_dirs or task_files:
        needed = gather_sentences(sentences_file, tasks, data_dirs, task_files)
    report = verify_cache(cache, needed)
    click.echo(report.summary())
    if not report.ok:
        ctx.exit(1)


@cache_group.command("merge")
@click.option("--out", metavar="CACHE.h5", default=None,
              help="The merged cache to create (never overwritten).  [required]")
@click.argument("shards", nargs=-1, required=True, metavar="SHARD...")
def cache_merge_command(out: Optional[str], shards) -> None:
    """Merge the shard files of `encode --shard` into --out (estratos.cache.merge_shards)."""
    import os
    import shlex

    from estratos.cache import merge_shards

    if out is None:
        # the merged file as a first argument (a script written before --out): say how
        hint = ""
        if shards and not os.path.exists(shards[0]) and len(shards) > 1:
            hint = (f"; for example: estratos cache merge --out {shlex.quote(shards[0])} "
                    + " ".join(shlex.quote(s) for s in shards[1:]))
        raise click.UsageError(f"Missing option '--out' (the merged cache to create){hint}")
    result = merge_shards(out, shards)
    click.echo(f"merged {result['shards']} shards into {result['path']} ({result['n_rows']} rows)")


# ---- tasks subcommands -------------------------------------------------------------------
_DATA_DIR_HELP = ("Data folder: DIR (a benchmark's own folder, for every suite) or SUITE=DIR; "
                  "repeatable [default: $ESTRATOS_DATA].")


@tasks_group.command("list")
@click.argument("selection", required=False, metavar="[IDS]")
@click.option("--data-dir", "data_dirs", multiple=True, metavar="[SUITE=]DIR", help=_DATA_DIR_HELP)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
@click.option("--sizes", is_flag=True, help="Count examples per split (reads line counts).")
@click.option("--task-file", "task_files", multiple=True, metavar="TASK.toml",
              help="Also list a custom task (repeatable).")
def tasks_list_command(selection, data_dirs, fmt, sizes, task_files) -> None:
    """List tasks and whether their data is present.

    Shows group, language, protocol, metric, classes, data presence and the fallback in
    use, without reading the data (estratos.tasks.commands.tasks_list_text).
    """
    from estratos.tasks.commands import tasks_list_text

    click.echo(tasks_list_text(selection, data_dirs, fmt, sizes, task_files))


@tasks_group.command("show")
@click.argument("task_id", metavar="ID")
@click.option("--data-dir", "data_dirs", multiple=True, metavar="[SUITE=]DIR", help=_DATA_DIR_HELP)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format.")
@click.option("--task-file", "task_files", multiple=True, metavar="TASK.toml",
              help="A custom task spec (repeatable).")
def tasks_show_command(task_id, data_dirs, fmt, task_files) -> None:
    """Load one task and describe it.

    Files, effective protocol, fallback, sizes, labels and an example per split
    (estratos.tasks.commands.tasks_show_text).
    """
    from estratos.tasks.commands import tasks_show_text

    click.echo(tasks_show_text(task_id, data_dirs, fmt, task_files))


@tasks_group.command("check")
@click.argument("selection", required=False, metavar="[IDS]")
@click.option("--data-dir", "data_dirs", multiple=True, metavar="[SUITE=]DIR", help=_DATA_DIR_HELP)
@click.option("--task-file", "task_files", multiple=True, metavar="TASK.toml",
              help="Also check a custom task (repeatable).")
@click.pass_context
def tasks_check_command(ctx: click.Context, selection, data_dirs, task_files) -> None:
    """Validate task files; exit 1 on any problem.

    Reads every file of the selected tasks (default: all with data present) and prints
    every problem as file:line (estratos.tasks.commands.tasks_check).
    """
    from estratos.tasks.commands import tasks_check

    outcome = tasks_check(selection, data_dirs, task_files)
    click.echo(outcome.text)
    ctx.exit(outcome.exit_code)


# ---- probe (stage two) -------------------------------------------------------------------
def _command_words(ctx: click.Context) -> List[str]:
    """The words of the command being run, rebuilt from its parsed options (what a hint that
    says "run this instead" starts from): every option given a value other than its
    default, in the command's option order."""
    words = ["estratos", *ctx.command_path.split()[1:]]
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if not isinstance(param, click.Option) or value is None or value == param.default \
                or value == ():
            continue
        option = max(param.opts, key=len)
        if param.is_flag:
            if value is True:
                words.append(option)
            elif param.secondary_opts:
                words.append(max(param.secondary_opts, key=len))
            continue
        for item in (value if param.multiple else [value]):
            words += [option, str(item)]
    return words


@cli.command("probe")
@click.option("--cache", required=True, metavar="CACHE.h5", help="A complete cache (stage one).")
@click.option("--tasks", metavar="IDS", default="",
              help="Task ids, suites or suite:GROUP, comma-separated.")
@_data_dir_option("Data folder")
@_task_file_option()
@click.option("--out", required=True, metavar="RESULTS.jsonl",
              help="Results file (appended; cells already there are skipped).")
@click.option("--resume-from", "resume_from", multiple=True, metavar="RESULTS.jsonl|GLOB",
              help="Also skip cells already in these results files (repeatable).")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar [default: when stderr is a terminal].")
@click_options(ProbeConfig)
def probe_command(cache, tasks, data_dirs, task_files, out, resume_from, progress,
                  **options) -> None:
    """Train probes for every task x layer x seed (estratos.probe.probe_tasks)."""
    config = ProbeConfig.build(**options)
    from estratos.probe.command import probe_tasks

    run = probe_tasks(cache, tasks, out, config, data_dir=data_dirs, task_files=task_files,
                      resume_from=resume_from, progress=progress)
    click.echo(run.describe(command=_command_words(click.get_current_context())))

# ---- report and baseline -----------------------------------------------------------------
@cli.command("report")
@click.argument("results", nargs=-1)
@click.option("--out", required=True, metavar="DIR", help="Folder for the report files.")
@click.option("--format", "formats", default="md,latex,csv,json,html", show_default=True,
              metavar="LIST", help="Comma list of md, latex, csv, json, html (one "
              "self-contained page; with --plot it embeds the figures).")
@click.option("--plot", is_flag=True,
              help='PNG heatmaps and layer curves under plots/, also embedded in report.html '
                   '(needs pip install "estratos[plot]").')
@click.option("--baseline", "baselines", multiple=True, metavar="BASELINE.jsonl",
              help="Results of `estratos baseline`: adds ODESIA Delta tables (repeatable).")
@click.option("--gap", nargs=2, default=None, metavar="EN_RESULTS ES_RESULTS",
              help="Adds ODESIA Ind(EN, ES) = Delta_EN - Delta_ES over paired datasets.")
@click.option("--pairs", metavar="PAIRS.toml", default=None,
              help="EN-ES dataset pairs for --gap [default: the shipped pairs file].")
@click.option("--reference", default="auto", show_default=True,
              help="Delta's reference point: auto, upper, lower or a number.")
@click.option("--ci", is_flag=True,
              help="Show each dataset cell as score [lo, hi]: a bootstrap interval over test "
                   "examples, from the predictions stored beside the results.")
@click.option("--significance", is_flag=True,
              help="Mark (†) the layers not significantly worse than each system's best "
                   "layer per dataset (paired bootstrap).")
@click.option("--correction", type=click.Choice(["holm", "bonferroni", "none"]),
              default="holm", show_default=True,
              help="Multiple-comparison correction of --significance.")
@click.option("--alpha", type=float, default=0.05, show_default=True,
              help="Significance level of --significance.")
@click.option("--level", type=float, default=0.95, show_default=True,
              help="Confidence level of --ci.")
@click.option("--resamples", type=int, default=1000, show_default=True,
              help="Bootstrap resamples of --ci and --significance.")
@click.option("--control", "controls", multiple=True, metavar="CONTROL.jsonl",
              help="A control model's results (e.g. encode --random-init): beside the "
                   "model's per layer, with the difference and its paired bootstrap "
                   "interval (repeatable).")
@click.option("--similarity", "similarity", multiple=True, metavar="SIM.jsonl",
              help="Records of `estratos similarity` / `geometry`: most-similar-layer and "
                   "geometry tables, heatmaps with --plot (repeatable; RESULTS may then be "
                   "empty).")
@click.option("--examples", type=click.IntRange(min=1), default=None, metavar="N",
              help="List, per system and task, the N test examples with the lowest and the N "
                   "with the highest pointwise V-information at the task's best layer, with "
                   "their texts and labels (from the predictions stored beside the results).")
def report_command(results, out, formats, plot, baselines, gap, pairs, reference, ci,
                   significance, correction, alpha, level, resamples, controls,
                   similarity, examples) -> None:
    """Paper-style tables (and figures) from RESULTS files alone
    (estratos.report.write_report); RESULTS may be glob patterns (e.g. shard files)."""
    from estratos.report import write_report
    from estratos.report.intervals import StatsOptions

    stats = StatsOptions(ci=ci, significance=correction if significance else None,
                         alpha=alpha, level=level, resamples=resamples)
    summary = write_report(results, out, formats=formats, plot=plot, baseline=baselines,
                           gap=tuple(gap) if gap else None, pairs=pairs, reference=reference,
                           stats=stats, control=controls, similarity=similarity,
                           examples=examples)
    click.echo(summary.describe())


@cli.command("compare")
@click.argument("results", nargs=-1, required=True)
@click.option("--task", required=True, metavar="TASK", help="Task id (or its unique name).")
@click.option("--a", "sel_a", required=True, metavar="KEY=VALUE[,...]",
              help='Cells A, e.g. "layer=8" or "model=org/name,layer=avg" (keys: '
                   f"{', '.join(CellKey.selector_keys())}).")
@click.option("--b", "sel_b", required=True, metavar="KEY=VALUE[,...]",
              help="Cells B, compared with A (the difference is B - A).")
@click.option("--metric", default=None, help="accuracy, f1, pearson or spearman "
              "[default: the task's metric].")
@click.option("--resamples", type=int, default=1000, show_default=True,
              help="Bootstrap resamples of the test set.")
@click.option("--level", type=float, default=0.95, show_default=True,
              help="Confidence level of the intervals.")
@click.option("--seed", type=int, default=BOOTSTRAP_SEED, show_default=True,
              help="Bootstrap seed.")
@click.option("--last-wins", is_flag=True,
              help="When two RESULTS files hold one cell with different results, use the copy "
                   "of the file given last (and say so) [default: refuse].")
def compare_command(results, task, sel_a, sel_b, metric, resamples, level, seed,
                    last_wins) -> None:
    """B - A on one task with its bootstrap interval and p-value, from the predictions
    stored beside RESULTS (estratos.report.compare.compare_cells)."""
    from estratos.report.compare import compare_cells

    click.echo(compare_cells(results, task, sel_a, sel_b, metric=metric, resamples=resamples,
                             level=level, seed=seed, last_wins=last_wins).describe())


@cli.command("baseline")
@click.option("--tasks", metavar="IDS", help="Task ids, suites or suite:GROUP (as for probe).")
@_task_file_option()
@_data_dir_option()
@click.option("--out", required=True, metavar="RESULTS.jsonl", help="Results file to append to.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar [default: when stderr is a terminal; lines otherwise].")
@click_options(BaselineConfig)
def baseline_command(tasks, task_files, data_dirs, out, progress, **options) -> None:
    """Surface baselines that read only the text (each --baseline name below) + logistic
    regression / cosine, written as results: a grid of task x baseline x seed cells run
    like probe's (estratos.probe.command.baseline_tasks)."""
    # a bad name, seed, --jobs or --shard answers before numpy and scikit-learn are imported
    config = BaselineConfig.build(**options)
    from estratos.probe.command import baseline_tasks

    run = baseline_tasks(tasks, out, config, data_dir=data_dirs, task_files=task_files,
                         progress=progress)
    click.echo(f"wrote {len(run)} baseline result(s) to {run.out}")
    if len(run):
        click.echo(run.timing())


# ---- similarity and geometry (estratos.similarity) -------------------------------------------
def _map_inputs(command: Callable) -> Callable:
    """The inputs ``similarity`` and ``geometry`` share: the cache, the sentences, the
    output (their other options come from :class:`~estratos.similarity.config.MapConfig`)."""
    options = [
        click.option("--cache", required=True, metavar="CACHE.h5", help="A complete cache."),
        click.option("--tasks", metavar="IDS", default=None,
                     help="The sentences of these tasks (ids, suites or suite:GROUP)."),
        click.option("--sentences", "sentences_file", metavar="FILE", default=None,
                     help="Or: the sentences of this file, one per line."),
        _task_file_option(), _data_dir_option("Data folder"),
        click.option("--out", required=True, metavar="RESULTS.jsonl",
                     help="Records file (appended; records already there are skipped)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@cli.command("similarity")
@_map_inputs
@click.option("--other", metavar="CACHE.h5", default=None,
              help="A second cache (another model, a random-init control, a checkpoint): "
                   "maps between the two [default: the cache with itself].")
@click_options(MapConfig)
def similarity_command(cache, tasks, sentences_file, task_files, data_dirs, out, other,
                       **options) -> None:
    """Layer x layer similarity within one cache or between two, rows joined on the
    sentence key: linear and debiased CKA, Procrustes, RSA, mutual k-NN
    (estratos.similarity.similarity_maps)."""
    config = MapConfig.build(**options)
    from estratos.similarity.run import similarity_maps

    run = similarity_maps(cache, out, config, other=other, tasks=tasks,
                          sentences_file=sentences_file, data_dirs=data_dirs,
                          task_files=task_files)
    click.echo(run.describe())


@cli.command("geometry")
@_map_inputs
@click_options(MapConfig, exclude=SIMILARITY_ONLY)
def geometry_command(cache, tasks, sentences_file, task_files, data_dirs, out,
                     **options) -> None:
    """Each layer's shape: anisotropy and rogue dimensions, massive activations, norms,
    effective rank, TwoNN intrinsic dimension (estratos.similarity.geometry_maps)."""
    config = MapConfig.build(**options)
    from estratos.similarity.run import geometry_maps

    run = geometry_maps(cache, out, config, tasks=tasks, sentences_file=sentences_file,
                        data_dirs=data_dirs, task_files=task_files)
    click.echo(run.describe())


# ---- slurm -------------------------------------------------------------------------------
@cli.command("slurm")
@click.argument("models", nargs=-1, metavar="MODEL...")
@click.option("--tasks", metavar="IDS", default="",
              help="Task ids, suites or suite:GROUP, comma-separated (as for probe).")
@_task_file_option("A custom task spec (repeatable; its absolute path goes in the scripts).")
@_data_dir_option()
@click.option("--out", required=True, metavar="DIR",
              help="Folder for the scripts, caches, results, report/ and logs/.")
@click_options(ProbeConfig, roles=_JOB_ROLES, help_prefix="Probe jobs: ")
@click_options(EncodeConfig, roles=_JOB_ROLES, exclude=("model",), rename=SLURM_ENCODE_FLAGS,
               prefix=SLURM_ENCODE_PREFIX, help_prefix="Encode jobs: ")
@click_options(Resources)
@click.option("--dry-run", is_flag=True, help="Write the scripts and submit.sh; submit nothing.")
def slurm_command(models, tasks, task_files, data_dirs, out, dry_run, **options) -> None:
    """Run encode -> merge -> probe -> report on SLURM as dependent job arrays
    (estratos.slurm.plan_pipeline, write_scripts, submit). Every option of probe and encode
    that says what the cells and caches are, or how they are computed, is taken: encode's
    --pooling and --device as --encode-pooling and --encode-device (--pooling and --device
    are the probe's); MODEL... are batchers with --encoder."""
    from estratos.slurm import find_sbatch, plan_pipeline, submit, write_scripts
    from estratos.slurm.plan import SUBMIT_SCRIPT

    encode_options = pick(EncodeConfig, options, prefix=SLURM_ENCODE_PREFIX)
    probe = ProbeConfig.build(**pick(ProbeConfig, options), jobs=1)
    resources = Resources.build(**pick(Resources, options))
    models = list(models)
    if encode_options.get("encoder"):
        if models:
            raise OptionError("MODEL: not with --encoder (the batcher is the model)")
        models = [encode_options["encoder"]]
    elif models:
        encode_options["model"] = models[0]
    encode = EncodeConfig.build(**encode_options) if models else None
    plan = plan_pipeline(models, tasks, data_dirs, out, task_files=task_files,
                         encode=encode, probe=probe, resources=resources)
    if not dry_run:
        find_sbatch()  # before writing anything
    paths = write_scripts(plan)
    click.echo(f"wrote {len(paths)} scripts to {plan.out}")
    if dry_run:
        import shlex

        click.echo(f"submit them with: bash {shlex.quote(str(plan.path(SUBMIT_SCRIPT)))}")
        return
    click.echo(submit(plan).describe())


# ---- demo --------------------------------------------------------------------------------
@tasks_group.command("build")
@click.argument("suite", type=click.Choice(["synthetic-es"]))
@click.option("--out", metavar="DIR", default=None,
              help="Output folder [default: ~/.cache/estratos/synthetic-es, where the "
                   "registry looks without --data-dir].")
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True,
              help="Generator seed.")
@click.option("--n-per-task", type=int, default=SYNTHETIC_N_PER_TASK, show_default=True,
              help="Examples per task (train/dev/test = 80/10/10); the demo's size by default.")
@click.option("--task", "task_names", multiple=True, metavar="NAME",
              help="Build only this task (repeatable) [default: all nine].")
def tasks_build_cmd(suite: str, out: Optional[str], seed: int, n_per_task: int,
                    task_names: Sequence[str]) -> None:
    """Generate a built-in suite (estratos.tasks.synthetic.build_synthetic_es)."""
    from estratos.tasks.synthetic import build_synthetic_es

    paths = build_synthetic_es(out, seed=seed, n_per_task=n_per_task,
                               tasks=task_names or None)
    for name, path in paths.items():
        click.echo(f"{suite}:{name}\t{path}")


@tasks_group.command("download")
@click.argument("benchmark", type=click.Choice(DOWNLOADABLE))
@click.option("--data-dir", metavar="DIR", default="~/.cache/estratos/es", show_default=True,
              help="Folder to fill with senteval/ and discoeval/ (pass it to --data-dir later).")
@click.option("--base-url", default="https://github.com", show_default=True,
              help="Where the GitHub repositories are served from (a mirror).")
@click.option("--timeout", type=float, default=10.0, show_default=True,
              help="Seconds to wait to connect and for each read.")
@click.option("--no-xprobe", is_flag=True, help="Skip the Spanish X-Probe files.")
@click.option("--keep-archive", is_flag=True, help="Keep the downloaded repository archive.")
@click.option("--allow-mismatch", is_flag=True,
              help="Install files that differ from the pinned commits' copies (an error "
                   "otherwise).")
@click.option("--progress/--no-progress", default=None,
              help="Progress bars [default: when stderr is a terminal].")
def tasks_download_cmd(benchmark: str, data_dir: str, base_url: str, timeout: float,
                       no_xprobe: bool, keep_archive: bool, allow_mismatch: bool,
                       progress: Optional[bool]) -> None:
    """Download and unpack a benchmark's data (estratos.tasks.download.DOWNLOADERS:
    download_es for es)."""
    import sys

    from estratos.tasks.download import DOWNLOADERS

    show = sys.stderr.isatty() if progress is None else progress
    download = DOWNLOADERS.get(benchmark, "BENCHMARK")
    report = download(data_dir, base_url=base_url, timeout=timeout, xprobe=not no_xprobe,
                      keep_archive=keep_archive, progress=show, allow_mismatch=allow_mismatch)
    for line in report.lines():
        click.echo(line)
    if not report.complete:
        raise click.ClickException(f"{len(report.missing)} expected files are missing")


@cli.command("demo")
@click.option("--out", metavar="DIR", default="estratos-demo", show_default=True,
              help="Folder for data, cache, results and report (rerunning resumes).")
@click.option("--model", default=None,
              help="Hugging Face model id or folder [default: the packaged all-MiniLM-L6-v2].")
@_seeds_option(",".join(map(str, DEMO_SEEDS)), "Comma-separated probe seeds.")
@_task_file_option("Also encode, probe and report this custom task (repeatable).")
@click.option("--n-per-task", type=int, default=SYNTHETIC_N_PER_TASK, show_default=True,
              help="Examples per synthetic task (the `tasks build` default too).")
@click.option("--progress/--no-progress", default=None,
              help="Progress bars [default: when stderr is a terminal].")
def demo_cmd(out: str, model: Optional[str], seeds: str, task_files: Sequence[str],
             n_per_task: int, progress: Optional[bool]) -> None:
    """Encode, probe every layer and report on built-in Spanish tasks, offline
    (estratos.demo.run_demo)."""
    from estratos.demo import run_demo

    summary = run_demo(out, model, parse_seeds(seeds), task_files=task_files,
                       n_per_task=n_per_task,
                       progress=progress, say=lambda line: click.echo(line, err=True))
    click.echo(summary.table)
    click.echo(summary.describe())


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Console-script entry point."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="estratos")


if __name__ == "__main__":  # python -m estratos.cli
    main()
