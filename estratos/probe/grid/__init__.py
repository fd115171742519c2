"""Running a grid: every (task, layer spec, pooling, seed) cell of a probe run, or every
(task, baseline, seed) cell of a baseline run.

What is here, in the order a run goes: the one loop both run through (:mod:`.loop`: what
is done, survey, units, shards, execute, collect), the probe's plan (:mod:`.runner`) and
the baselines' (:mod:`.baselines`), the work units and their cost model (:mod:`.plan`), the
pool of processes that runs them (:mod:`.pool`), what each process does with a probe unit
(:mod:`.units`), progress and its ETA (:mod:`.progress`, :mod:`.eta`), and what a run
returns (:mod:`.outcome`). What a cell is and how it is evaluated lives one level up
(:mod:`estratos.probe.cells`, :mod:`estratos.probe.config`, :mod:`estratos.probe.records`,
:mod:`estratos.probe.baseline`).
"""
