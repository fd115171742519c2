"""Run the fault campaign (tests/faults, marker ``faults``) and print the figures that
docs/reliability.md publishes.

    python bench/fault_figures.py [extra pytest arguments]

The tests count every crash point, corruption, fuzz case and concurrency scenario they try
and each one that passed its checks; this script asks them (ESTRATOS_FAULT_FIGURES) to write
those counts to a file, then prints the table and the per-point details.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "figures.json"
        env = {**os.environ, "ESTRATOS_FAULT_FIGURES": str(target), "HF_HUB_OFFLINE": "1"}
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "pytest", "-q", "-m", "faults", "tests/faults",
               "-p", "no:cacheprovider", *sys.argv[1:]]
        code = subprocess.run(cmd, cwd=REPO, env=env).returncode
        seconds = time.monotonic() - t0
        if not target.exists():
            print("no figures written (did the session start?)", file=sys.stderr)
            return code or 1
        data = json.loads(target.read_text())
    c, details = data["counts"], data["details"]
    rows = [
        ("crash points tried / survived",
         f"{c['crash_points_tried']} / {c['crash_points_survived']}"),
        ("rows (cache rows + result cells) lost", str(c["rows_lost"])),
        ("corruptions injected / detected",
         f"{c['corruptions_injected']} / {c['corruptions_detected']}"),
        ("fuzz cases run / escaped exceptions", f"{c['fuzz_cases']} / {c['fuzz_escaped']}"),
        ("concurrency scenarios / failures",
         f"{c['concurrency_scenarios']} / {c['concurrency_scenarios'] - c['concurrency_passed']}"),
    ]
    print(f"\nfault campaign: pytest exit {code}, {seconds:.0f}s on {os.cpu_count()} cores, "
          f"{platform.platform()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    kinds = Counter(d["kind"] for d in details)
    print("\ndetails: " + ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items())))
    for d in details:
        if d["kind"] in ("random-flips", "concurrency", "corruption"):
            print("  " + json.dumps(d, ensure_ascii=False))
    points = [d["point"] for d in details if d["kind"] in ("encode-kill", "probe-kill")]
    print("  crash points: " + "; ".join(points))
    return code


if __name__ == "__main__":
    sys.exit(main())
