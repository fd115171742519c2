"""The whole pipeline on a SLURM cluster, as plain job scripts chained by the scheduler.

Public API (see docs/cluster.md):

- :func:`plan_pipeline` -> :class:`SlurmPlan`: the scripts of one submission (encode array ->
  merge + verify -> probe array, per model; then one report), nothing written yet;
- :func:`write_scripts`: the scripts and ``submit.sh`` into the plan's folder;
- :func:`submit` -> :class:`Submission`: ``sbatch --parsable`` per script with
  ``--dependency=afterok`` chains; the job ids and :func:`progress_command`.

This package sits above the others: it only writes ``estratos`` command lines, which the
jobs run on the cluster's nodes.
"""

from estratos.slurm.plan import JobScript, SlurmPlan, model_slugs, plan_pipeline
from estratos.slurm.submit import Submission, find_sbatch, progress_command, submit, write_scripts

__all__ = ["JobScript", "SlurmPlan", "Submission", "find_sbatch", "model_slugs",
           "plan_pipeline", "progress_command", "submit", "write_scripts"]
