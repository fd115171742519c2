"""Writing a plan's scripts and handing them to the scheduler (``sbatch --parsable``).

Why the scheduler's own tools: SLURM already knows how to chain jobs (``--dependency=afterok``)
and how to show them (``squeue``); estratos only writes the scripts and calls ``sbatch`` once
per script, in order, so nothing of ours keeps running after the command returns.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from estratos.errors import OptionError, SchedulerError
from estratos.files import write_atomic
from estratos.slurm.plan import LOG_DIR, SUBMIT_SCRIPT, SlurmPlan

log = logging.getLogger(__name__)


def write_scripts(plan: SlurmPlan) -> List[Path]:
    """Write every job script and ``submit.sh`` into ``plan.out`` (created, with ``logs/``);
    returns their paths. Existing scripts are replaced whole (atomically)."""
    (plan.out / LOG_DIR).mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in [(job.name, job.text) for job in plan.jobs] + [
            (SUBMIT_SCRIPT, plan.submit_script())]:
        path = plan.path(name)
        write_atomic(path, text)
        mode = path.stat().st_mode
        os.chmod(path, mode | (mode & 0o444) >> 2)  # executable by whoever may read it
        paths.append(path)
    return paths


def progress_command(job_ids: Sequence[str]) -> str:
    """The one command that shows every job of a submission, pending, running or ended."""
    return f"squeue --states=all --jobs={','.join(job_ids)}"


@dataclass(frozen=True)
class Submission:
    """What :func:`submit` did: the job id of each script, in submission order."""

    out: Path
    job_ids: Dict[str, str]  # script name -> job id

    @property
    def progress(self) -> str:
        return progress_command(list(self.job_ids.values()))

    def describe(self) -> str:
        lines = [f"submitted {len(self.job_ids)} jobs (scripts in {self.out}):"]
        width = max(len(i) for i in self.job_ids.values())
        lines += [f"  {job_id:>{width}}  {name}" for name, job_id in self.job_ids.items()]
        lines.append(f"progress: {self.progress}")
        return "\n".join(lines)


def find_sbatch(sbatch: str = "sbatch") -> str:
    """The ``sbatch`` program, or an :class:`OptionError` saying what to do without one."""
    found = shutil.which(sbatch)
    if found is None:
        raise OptionError(f"sbatch: {sbatch!r} not found on PATH; run on a SLURM login node, "
                          "or pass --dry-run to only write the scripts")
    return found


def submit(plan: SlurmPlan, *, sbatch: str = "sbatch",
           environ: Optional[Dict[str, str]] = None) -> Submission:
    """Submit the scripts written by :func:`write_scripts`, each after the jobs it waits for.

    The scripts are read from disk (edits made after writing them count). If ``sbatch``
    refuses a script, the jobs already submitted are cancelled (``scancel``) and
    :class:`~estratos.errors.SchedulerError` gives sbatch's message.
    """
    program = find_sbatch(sbatch)
    missing = [job.name for job in plan.jobs if not plan.path(job.name).is_file()]
    if missing:
        raise OptionError(f"{plan.out}: scripts not written yet ({', '.join(missing)}); "
                          "call write_scripts(plan) first")
    ids: Dict[str, str] = {}
    for job in plan.jobs:
        args = [program, "--parsable"]
        if job.after:
            args.append("--dependency=afterok:" + ":".join(ids[name] for name in job.after))
        args.append(str(plan.path(job.name)))
        done = subprocess.run(args, capture_output=True, text=True, env=environ, check=False)
        job_id = done.stdout.strip().split(";")[0]
        if done.returncode != 0 or not job_id.isdigit():
            _cancel(list(ids.values()), environ)
            message = (done.stderr or done.stdout).strip() or f"exit code {done.returncode}"
            raise SchedulerError(f"{plan.path(job.name)}: sbatch refused it: {message}"
                                 + (f" (cancelled jobs {', '.join(ids.values())})"
                                    if ids else ""))
        log.info("submitted %s as job %s", job.name, job_id)
        ids[job.name] = job_id
    return Submission(plan.out, ids)


def _cancel(job_ids: List[str], environ: Optional[Dict[str, str]]) -> None:
    if not job_ids:
        return
    scancel = shutil.which("scancel")
    if scancel is None:
        log.warning("scancel not found: cancel jobs %s by hand", ", ".join(job_ids))
        return
    subprocess.run([scancel, *job_ids], capture_output=True, env=environ, check=False)
