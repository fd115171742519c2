"""The synthetic-es specs read what `estratos tasks build synthetic-es` writes."""

from __future__ import annotations

import pytest

from estratos.tasks import DataDirs, check_tasks, load_task, select_tasks


def test_generated_suite_loads_through_the_registry(tmp_path):
    synthetic = pytest.importorskip("estratos.tasks.synthetic")
    synthetic.build_synthetic_es(tmp_path, n_per_task=200)
    dirs = DataDirs.parse([f"synthetic-es={tmp_path}"])
    specs = select_tasks("synthetic-es")
    assert [s.name for s in specs] == ["Tense", "SubjNumber", "ObjNumber", "Length",
                                       "BigramShift", "CoordinationInversion", "OddManOut",
                                       "Depth", "WordContent"]
    assert check_tasks(specs, dirs) == []
    for spec in specs:
        data = load_task(spec, dirs)
        assert data.fallback is None and set(data.sizes) == {"train", "dev", "test"}
        assert all(n > 0 for n in data.sizes.values()) and len(data.labels) >= 2
