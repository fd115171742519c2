"""Option parsing a new user runs into: probe's --pooling is a choice that
explains a comma list, and every --data-dir help names the $ESTRATOS_DATA default."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from estratos.cli import cli


@pytest.mark.parametrize("value", ["cls,mean", "mean, cls"])
def test_probe_refuses_a_pooling_list_saying_one_per_run(tmp_path, value):
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(cli, ["probe", "--cache", str(tmp_path / "c.h5"), "--tasks",
                                      "synthetic-es:Tense", "--out", str(out),
                                      "--pooling", value])
    assert result.exit_code == 2
    assert "probe takes one pooling per run" in result.output
    assert "--pooling cls" in result.output and "--pooling mean" in result.output
    assert not out.exists()


def test_probe_pooling_is_a_choice_like_encodes(tmp_path):
    result = CliRunner().invoke(cli, ["probe", "--cache", str(tmp_path / "c.h5"), "--tasks",
                                      "synthetic-es:Tense", "--out", str(tmp_path / "r.jsonl"),
                                      "--pooling", "max"])
    assert result.exit_code == 2
    assert "'max' is not one of 'cls', 'mean', 'last', 'encoder'" in result.output
    helps = [CliRunner().invoke(cli, [cmd, "--help"]).output for cmd in ("probe", "encode")]
    # probe also takes the vectors of an --encoder cache (estratos.vocab.CACHE_POOLINGS)
    assert "--pooling [cls|mean|last|encoder]" in helps[0] and "[cls|mean|last]" in helps[1]
    assert "one pooling per run" in " ".join(helps[0].split())


@pytest.mark.parametrize("command", [["baseline"], ["probe"], ["tasks", "list"],
                                     ["tasks", "show"], ["tasks", "check"]])
def test_data_dir_help_names_the_environment_default(command):
    text = " ".join(CliRunner().invoke(cli, command + ["--help"]).output.split())
    match = re.search(r"--data-dir \[SUITE=\]DIR (.*?)(?= --[a-z])", text)
    assert match and "[default: $ESTRATOS_DATA]" in match.group(1), text


def test_ctrl_c_outside_a_runs_own_handler_exits_130_saying_files_are_whole(monkeypatch,
                                                                            tmp_path):
    """A Ctrl-C that lands while a command starts or finishes (after the run's own handler
    has returned) still exits 130 with a message, not click's bare "Aborted!"."""
    import estratos.probe.command as command

    def late_interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "probe_tasks", late_interrupt)
    cache = tmp_path / "c.h5"
    cache.write_bytes(b"")
    result = CliRunner().invoke(cli, ["probe", "--cache", str(cache), "--tasks", "all",
                                      "--out", str(tmp_path / "r.jsonl")])
    assert result.exit_code == 130, result.output
    assert "interrupted (Ctrl-C)" in result.output and "rerun the same command" in result.output
    assert "Aborted!" not in result.output


def test_cuda_without_a_gpu_driver_fails_at_once(tmp_path, monkeypatch):
    """Refused by the pre-torch check, by encode and probe alike: torch is never asked
    (checked by what is called, not timed, so a loaded machine cannot make it flaky)."""
    import torch

    import estratos.devices as devices

    sentences = tmp_path / "s.txt"
    sentences.write_text("hola\n", encoding="utf-8")
    runner = CliRunner()
    monkeypatch.setattr(devices, "gpu_driver_present", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("torch was asked"))
    for command in (["encode", "--model", str(tmp_path), "--sentences", str(sentences),
                     "--out", str(tmp_path / "c.h5")],
                    ["probe", "--cache", str(tmp_path / "c.h5"), "--tasks",
                     "es-senteval:TASS1", "--out", str(tmp_path / "r.jsonl")]):
        res = runner.invoke(cli, command + ["--device", "cuda:0"])
        assert res.exit_code == 2, res.output
        assert ("--device: 'cuda:0' asks for a GPU but CUDA is not available on this machine "
                "(no GPU driver") in res.output


def test_one_rule_for_a_local_model_folder(tmp_path, monkeypatch):
    """encode, the cache's --expect-model check, the demo and the SLURM plans share one rule
    (estratos.model_source.is_local_model) and record a folder by its resolved path."""
    from estratos.model_source import is_local_model, model_identity

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "model").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "org" / "model")
    assert not is_local_model("some-org/some-model")  # a hub id: not on disk here
    assert model_identity("some-org/some-model") == "some-org/some-model"
    for written in ("org/model", "./org/model", "~/org/model", str(tmp_path / "link")):
        assert is_local_model(written)
        assert model_identity(written) == str((tmp_path / "org" / "model").resolve())
    assert is_local_model("./not-yet-there")  # written as a path: a folder, even if missing


@pytest.mark.parametrize("command", [
    ["report", "{results}"],
    ["tasks", "build", "synthetic-es", "--n-per-task", "200"],
    ["demo"],
])
@pytest.mark.parametrize("where, needle", [
    ("afile/out", "Not a directory ({tmp}/afile is a file)"),  # refused as root too
    ("afile", "exists and is not a folder"),
    ("/proc/estratos-out", "cannot create files in /proc"),
])
def test_an_out_folder_that_cannot_be_made_is_one_error_line(tmp_path, command, where,
                                                             needle):
    """report, demo and tasks build check --out before any work, as probe, baseline and
    encode do: one `Error:` line naming the option, exit 2, nothing written (a path under a
    regular file and /proc are refused whoever runs the tests, root included)."""
    import json

    (tmp_path / "afile").write_text("x")
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps({
        "schema": 2, "kind": "probe", "task": "s:A", "suite": "s", "name": "A",
        "group": "SC", "layer": 0, "pooling": "cls", "seed": 1,
        "classifier": {"name": "senteval"}, "metric": "accuracy", "score": 50.0,
        "test": {"accuracy": 50.0}, "model": "m", "revision": "r"}) + "\n")
    out = where if where.startswith("/") else str(tmp_path / where)
    args = [a.format(results=results) for a in command] + ["--out", out]
    before = sorted(p.name for p in tmp_path.iterdir())
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2, res.output
    assert res.output.count("Error:") == 1 and "Traceback" not in res.output
    assert f"Error: --out {out}: " in res.output
    assert needle.format(tmp=tmp_path) in res.output, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "afile").read_text() == "x"
