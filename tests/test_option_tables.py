"""The option tables (estratos.optiontable): each option declared once reaches the command's
--help, the configuration, its command line and SLURM's job scripts."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict

import click
import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.encode.config import EncodeConfig
from estratos.errors import OptionError
from estratos.optiontable import Role, click_options, option, options_of, pick
from estratos.probe.config import BaselineConfig, ProbeConfig
from estratos.similarity.config import MapConfig
from estratos.slurm import plan_pipeline
from estratos.slurm.plan import SLURM_ENCODE_FLAGS, Resources
from estratos.tasks.synthetic import build_synthetic_es

TASKS = "synthetic-es:Tense"

#: a value other than the default for every option that `estratos slurm` passes on: a new
#: option of encode or probe must be given one here (the walk below fails until it is)
EXAMPLES: Dict[str, Dict[str, str]] = {
    "probe": {"--layers": "0,avg", "--pooling": "mean", "--seeds": "1,2",
              "--classifier": "lbfgs", "--features": "raw", "--control": "control-task",
              "--control-l2": "task", "--mdl": "", "--sequential": "", "--device": "cpu",
              "--given": "prev", "--erase": "random:2"},
    "encode": {"--encoder": "", "--pooling": "mean", "--states": "0,1", "--dtype": "float32",
               "--max-length": "16", "--lowercase": "", "--prompt": 'Dice: "{}"',
               "--chat-template": "", "--mean-first-token": "keep", "--model-dtype": "float32",
               "--device-map": "", "--trust-remote-code": "", "--random-init": "3",
               "--device": "cpu", "--batch-tokens": "512"},
}
#: options that cannot go with the others in one slurm call (--encoder replaces MODEL;
#: --device-map wants --device auto; --mdl needs senteval; --given and --erase refuse
#: --control and each other): each is checked on its own
ALONE = {"--encoder", "--device-map", "--mdl", "--given", "--erase"}


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    build_synthetic_es(out, n_per_task=200, tasks=["Tense"])
    return out


def job_options(config: Any) -> Dict[str, str]:
    """flag -> option of the options ``slurm`` passes on from this configuration."""
    return {spec.flag: field.name for field, spec in options_of(config)
            if spec.role in (Role.IDENTITY, Role.EXECUTION) and field.name != "model"}


def test_every_option_slurm_passes_on_has_an_example():
    assert set(job_options(ProbeConfig)) == set(EXAMPLES["probe"])
    assert set(job_options(EncodeConfig)) == set(EXAMPLES["encode"])


def slurm_word(stage: str, flag: str) -> str:
    """The flag ``estratos slurm`` takes for a stage's option."""
    if stage == "encode":
        name = job_options(EncodeConfig)[flag]
        return SLURM_ENCODE_FLAGS.get(name, flag)
    return flag


def test_every_identity_and_execution_option_reaches_the_job_scripts(synth, tmp_path):
    """Walks both tables: each option, given to `estratos slurm`, is written in the encode or
    probe job script as the stage's own option with its value."""
    together = []
    for stage in ("probe", "encode"):
        for flag, value in EXAMPLES[stage].items():
            if flag in ALONE:
                continue
            together += [slurm_word(stage, flag)] + ([value] if value else [])
    # --control-l2 task and --classifier lbfgs are fine together; --mdl is checked alone
    out = tmp_path / "run"
    res = CliRunner().invoke(cli, ["slurm", "org/m", "--tasks", TASKS, "--data-dir",
                                   f"synthetic-es={synth}", "--out", str(out), "--dry-run",
                                   *together])
    assert res.exit_code == 0, res.output
    scripts = {stage: (out / f"m.{stage}.sbatch").read_text() for stage in ("encode", "probe")}
    for stage in ("probe", "encode"):
        for flag, value in EXAMPLES[stage].items():
            if flag in ALONE:
                continue
            line = f"    {flag} {shlex.quote(value)} \\" if value else f"    {flag} \\"
            assert line in scripts[stage].splitlines(), (stage, flag)


@pytest.mark.parametrize("args, stage, line", [
    (["--mdl"], "probe", "    --mdl \\"),
    (["--given", "prev"], "probe", "    --given prev \\"),
    (["--erase", "random:2"], "probe", "    --erase random:2 \\"),
    (["--device-map", "auto"], "encode", "    --device-map auto \\"),
])
def test_options_that_need_their_own_call_reach_the_scripts(synth, tmp_path, args, stage, line):
    out = tmp_path / "run"
    res = CliRunner().invoke(cli, ["slurm", "org/m", "--tasks", TASKS, "--data-dir",
                                   f"synthetic-es={synth}", "--out", str(out), "--dry-run",
                                   *args])
    assert res.exit_code == 0, res.output
    assert line in (out / f"m.{stage}.sbatch").read_text().splitlines()


def test_an_encoder_batcher_runs_as_the_model_of_every_job(synth, tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(cli, ["slurm", "--encoder", "mypkg.enc:batcher", "--tasks", TASKS,
                                   "--data-dir", f"synthetic-es={synth}", "--out", str(out),
                                   "--dry-run"])
    assert res.exit_code == 0, res.output
    encode = (out / "mypkg.enc-batcher.encode.sbatch").read_text()
    probe = (out / "mypkg.enc-batcher.probe.sbatch").read_text()
    assert "    --encoder mypkg.enc:batcher \\" in encode.splitlines() and "--model" not in encode
    assert "    --expect-model mypkg.enc:batcher \\" in probe.splitlines()
    res = CliRunner().invoke(cli, ["slurm", "org/m", "--encoder", "a:b", "--tasks", TASKS,
                                   "--out", str(tmp_path / "x"), "--dry-run"])
    assert res.exit_code == 2 and "Error: MODEL: not with --encoder" in res.output


def test_the_probe_pooling_is_what_the_encode_jobs_store(synth, tmp_path):
    """`slurm MODEL --pooling last`: the encode jobs store last (the probe jobs read it), and
    an --encode-pooling that leaves it out is refused before anything is written."""
    args = ["org/m", "--tasks", TASKS, "--data-dir", f"synthetic-es={synth}", "--dry-run"]
    res = CliRunner().invoke(cli, ["slurm", *args, "--out", str(tmp_path / "a"),
                                   "--pooling", "last"])
    assert res.exit_code == 0, res.output
    encode = (tmp_path / "a" / "m.encode.sbatch").read_text().splitlines()
    assert "    --pooling last \\" in encode and "    --pooling cls \\" not in encode
    res = CliRunner().invoke(cli, ["slurm", *args, "--out", str(tmp_path / "b"),
                                   "--pooling", "last", "--encode-pooling", "cls"])
    assert res.exit_code == 2
    assert "Error: --pooling: the probe jobs read 'last', which the encode jobs" in res.output
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("config_cls", [ProbeConfig, EncodeConfig, BaselineConfig, Resources,
                                        MapConfig])
def test_every_option_has_one_flag_and_its_help(config_cls):
    flags = [spec.flag for _field, spec in options_of(config_cls)]
    assert len(flags) == len(set(flags))
    assert all(spec.help for _field, spec in options_of(config_cls))


@pytest.mark.parametrize("command, config_cls", [
    ("probe", ProbeConfig), ("encode", EncodeConfig), ("baseline", BaselineConfig),
    ("slurm", Resources), ("similarity", MapConfig)])
def test_every_option_is_in_its_commands_help(command, config_cls):
    res = CliRunner().invoke(cli, [command, "--help"], terminal_width=200)
    assert res.exit_code == 0
    for _field, spec in options_of(config_cls):
        assert f"  {spec.flag} " in res.output, spec.flag


@pytest.mark.parametrize("config_cls, given", [
    (ProbeConfig, {"layers": "0,2,avg", "pooling": "mean", "seeds": "3,1", "classifier":
                   "lbfgs", "control": "label-shuffle", "control_l2": "task",
                   "sequential": True, "device": "cpu"}),
    (ProbeConfig, {"mdl": True, "features": "standardized"}),
    (EncodeConfig, {"model": "org/m", "poolings": ("last", "mean"), "states": "every:2",
                    "dtype": "bfloat16", "max_length": 32, "prompt": "x {} y",
                    "random_init": 5, "batch_tokens": 100}),
    (BaselineConfig, {"baselines": "length-tokens,tfidf", "seeds": "2"}),
    (MapConfig, {"layers": "0,avg", "measures": "rsa,linear-cka", "features": ["raw"],
                 "max_sentences": 100, "seed": 3, "k": 5, "products": "float64",
                 "bootstrap": 50, "bootstrap_seed": 7}),
])
def test_the_command_line_written_parses_back_to_the_same_configuration(config_cls, given):
    config = config_cls.build(**given)

    @click.command()
    @click_options(config_cls)
    def parse(**options: Any) -> None:
        assert config_cls.build(**pick(config_cls, options)) == config

    res = CliRunner().invoke(parse, [w for flag, value in config.to_options()
                                     for w in ([flag] if value is None else [flag, value])])
    assert res.exit_code == 0, res.output


def test_one_wording_for_a_bad_value_of_any_option():
    with pytest.raises(OptionError) as probe_err:
        ProbeConfig.build(control="control-tsk")
    with pytest.raises(OptionError) as encode_err:
        EncodeConfig.build(model="m", mean_first_token="skp")
    assert probe_err.value.cli_text().startswith(
        "--control: unknown control 'control-tsk' (closest: control-task); choose from ")
    assert encode_err.value.cli_text().startswith(
        "--mean-first-token: unknown mean first token 'skp' (closest: skip, keep); choose from ")


def test_adding_an_option_is_one_field(synth, tmp_path):
    """docs/contracts.md, "adding an option": one field in the table, and the option is in the
    command's --help, the configuration, its command line and SLURM's probe job scripts."""

    @dataclass(frozen=True)
    class WithTemperature(ProbeConfig):
        temperature: float = option(1.0, "--temperature", "Softmax temperature of the probe.",
                                    check=float, click_type=lambda: float)

    @click.command()
    @click_options(WithTemperature)
    def probe(**options: Any) -> None:
        click.echo(repr(WithTemperature.build(**pick(WithTemperature, options)).temperature))

    res = CliRunner().invoke(probe, ["--help"])
    assert "--temperature FLOAT" in res.output and "Softmax temperature" in res.output
    res = CliRunner().invoke(probe, ["--temperature", "0.5"])
    assert res.output.strip() == "0.5"
    config = WithTemperature.build(temperature="0.5", seeds="1")
    assert dataclasses.asdict(config)["temperature"] == 0.5
    assert config.to_argv()[-2:] == ["--temperature", "0.5"]
    plan = plan_pipeline(["org/m"], TASKS, [f"synthetic-es={synth}"], tmp_path, probe=config)
    assert "    --temperature 0.5 \\" in plan.job("m.probe.sbatch").text.splitlines()
