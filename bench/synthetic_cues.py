"""Benchmark: every surface cue's test accuracy on every synthetic-es task, against majority.

    python bench/synthetic_cues.py                      # 6,000 per task, data seed 1111
    python bench/synthetic_cues.py --n-per-task 2000 --tasks Depth,WordContent
    python bench/synthetic_cues.py --markdown           # the table of docs/tasks.md

Builds each task with :func:`estratos.tasks.synthetic.generate_task` and scores each cue of
:data:`estratos.probe.cues.SINGLE_CUES` alone with :func:`estratos.probe.cue_audit.
cue_scores` (logistic regression, L2 chosen on dev, accuracy on test). A cue above majority +
5 points that the task does not exempt is marked ``*``; the exit status is 1 when any is.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from estratos.probe.cues import SINGLE_CUES  # noqa: E402
from estratos.tasks.synthetic import GENERATOR_VERSION, TASK_NAMES, generate_task  # noqa: E402
from estratos.probe.cue_audit import (  # noqa: E402
    EXEMPT,
    MARGIN,
    cue_scores,
    majority_rate,
    over_margin,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-per-task", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=1111)
    parser.add_argument("--tasks", default=",".join(TASK_NAMES))
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    cues = list(SINGLE_CUES)
    header = ["task", "majority"] + cues
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|---|" + "---:|" * (len(header) - 1))
    else:
        print(f"generator version {GENERATOR_VERSION}, {args.n_per_task} per task, "
              f"data seed {args.seed}; '*' = above majority + {MARGIN:g}, "
              "'(x)' = exempt for the task")
        print("\t".join(header + ["seconds"]))
    failed = False
    for task in args.tasks.split(","):
        start = time.perf_counter()
        rows = generate_task(task, args.n_per_task, args.seed)
        scores = cue_scores(rows, cues)
        majority = majority_rate(rows)
        over = over_margin(task, scores, majority)
        failed = failed or bool(over)
        exempt = EXEMPT.get(task, frozenset())
        cells = []
        for cue in cues:
            text = f"{scores[cue]:.1f}"
            if cue in over:
                text = f"**{text}**" if args.markdown else text + "*"
            elif cue in exempt:
                text = f"({text})"
            cells.append(text)
        seconds = time.perf_counter() - start
        if args.markdown:
            print(f"| {task} | {majority:.1f} | " + " | ".join(cells) + " |")
        else:
            print("\t".join([task, f"{majority:.1f}"] + cells + [f"{seconds:.0f}"]),
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
