"""Running a probe grid: every (task, layer spec, pooling, seed) cell of a run.

What is here, in the order a run goes: the runner (:mod:`.runner`: plan, execute,
collect), the work units and their cost model (:mod:`.plan`), the pool of processes that
runs them (:mod:`.pool`), what each process does with a unit (:mod:`.units`), progress and
its ETA (:mod:`.progress`, :mod:`.eta`), and what a run returns (:mod:`.outcome`). What a
cell is and how it is evaluated lives one level up (:mod:`estratos.probe.cells`,
:mod:`estratos.probe.config`, :mod:`estratos.probe.records`).
"""
