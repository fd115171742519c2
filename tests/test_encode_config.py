"""EncodeConfig: the one home of encode's option checks and the one writer of its options."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from estratos.cli import cli, encode_command
from estratos.encode.config import EncodeConfig
from estratos.errors import OptionError

#: every field away from its default, as the CLI's keywords
CHANGED = {"poolings": ("mean", "cls"), "states": "0,2", "dtype": "float32", "max_length": 16,
           "lowercase": True, "prompt": "Frase: {}", "chat_template": True,
           "mean_first_token": "keep", "model_dtype": "bfloat16", "trust_remote_code": True,
           "random_init": 7, "batch_tokens": 512}


def _config_from_words(words):
    """What the encode command builds from these words (its own parser, then build)."""
    p = encode_command.make_context("encode", [*words, "--out", "x.h5"]).params
    return EncodeConfig.build(model=p["model"], encoder=p["encoder"],
                              poolings=p["poolings"] or None, device=p["device"],
                              threads=p["threads"],
                              **{k: p[k] for k in CHANGED if k != "poolings"})


def test_to_argv_parsed_by_the_encode_command_gives_the_same_configuration():
    config = EncodeConfig.build(model="some/model", **CHANGED)
    assert _config_from_words(config.to_argv()) == config
    plain = EncodeConfig.build(model="some/model")
    assert plain.to_argv() == ["--model", "some/model"]
    assert _config_from_words(plain.to_argv()) == plain


def test_to_options_pairs_and_repeated_poolings():
    config = EncodeConfig.build(model="m", poolings=["mean", "last", "mean"], lowercase=True)
    assert config.poolings == ("mean", "last")
    assert config.to_options() == [("--model", "m"), ("--pooling", "mean"),
                                   ("--pooling", "last"), ("--lowercase", None)]


def test_replace_checks_again():
    config = EncodeConfig.build(model="m")
    assert config.replace(dtype="bfloat16").dtype == "bfloat16"
    with pytest.raises(OptionError) as info:
        config.replace(dtype="float8")
    assert info.value.cli_text().startswith("--dtype")


@pytest.mark.parametrize("options, message", [
    ({}, "--model: required"),
    ({"model": "m", "encoder": "a:b"}, "--encoder and --model: give one of them"),
    ({"model": "m", "dtype": "float8"}, "--dtype: unknown dtype 'float8'"),
    ({"model": "m", "max_length": 1}, "--max-length: must be an integer >= 2"),
    ({"model": "m", "batch_tokens": "lots"}, "--batch-tokens"),
    ({"model": "m", "states": "every:0"}, "--states"),
    ({"model": "m", "prompt": "no slot"}, "--prompt"),
    ({"model": "m", "mean_first_token": "drop"}, "--mean-first-token"),
    ({"model": "m", "model_dtype": "int8"}, "--model-dtype"),
    ({"model": "m", "device_map": "balanced"}, "--device-map"),
    ({"model": "m", "device_map": "auto", "device": "cpu"}, "leave --device at auto"),
    ({"model": "m", "random_init": -1}, "--random-init"),
    ({"model": "m", "threads": 0}, "--threads"),
    ({"model": "m", "shard": "3/2"}, "--shard"),
    ({"model": "m", "poolings": ["max"]}, "--pooling: unknown pooling 'max'"),
    ({"model": "m", "poolings": ["encoder"]}, "--pooling: unknown pooling 'encoder'"),
    ({"encoder": "a:b", "prompt": "{}"}, "--prompt: only for --model"),
    ({"encoder": "a:b", "random_init": 1}, "--random-init: only for --model"),
    ({"encoder": "a:b", "max_length": 8}, "--max-length: not used with --encoder"),
    ({"encoder": "a:b", "states": "0"}, "--states: not with --encoder"),
    ({"encoder": "a:b", "poolings": ["mean"]}, "--pooling: an --encoder function"),
])
def test_every_check_names_its_option(options, message):
    with pytest.raises(OptionError) as info:
        EncodeConfig.build(**options)
    assert message in info.value.cli_text()


def test_a_batcher_config_keeps_its_one_pooling():
    """A batcher's one vector kind is its default: asked for by name it is the same
    configuration, written nowhere."""
    config = EncodeConfig.build(encoder="pkg.mod:batcher", poolings=["encoder"])
    assert config == EncodeConfig.build(encoder="pkg.mod:batcher")
    assert config.to_argv() == ["--encoder", "pkg.mod:batcher"]


@pytest.mark.parametrize("states, text", [((0, 3), "0,3"), (["every:4"], "every:4"),
                                          (["last:2", 0], "last:2,0"), ("ALL", "all"),
                                          (None, "all")])
def test_states_have_one_form_whatever_they_were_given_as(states, text):
    config = EncodeConfig.build(model="m", states=states)
    assert config.states == text
    assert _config_from_words(config.to_argv()).states == text


def test_max_length_as_text_and_a_batchers_refusal_first():
    assert EncodeConfig.build(model="m", max_length="128").max_length == 128
    with pytest.raises(OptionError) as info:
        EncodeConfig.build(encoder="a:b", max_length=1)
    assert info.value.cli_text().startswith("--max-length: not used with --encoder")


def test_a_config_made_by_hand_is_checked_before_anything_is_written(tmp_path):
    from estratos.encode import encode_sentences

    with pytest.raises(OptionError) as info:
        encode_sentences(["uno"], EncodeConfig(model="m", dtype="float8"), tmp_path / "c.h5")
    assert info.value.cli_text().startswith("--dtype")
    assert not list(tmp_path.iterdir())


def test_the_cli_refuses_a_bad_option_before_reading_inputs_or_torch(tmp_path):
    """One Error line naming the option, exit 2, nothing written; the check runs before the
    sentences file is read (it does not exist here) and before torch is imported."""
    out = tmp_path / "c.h5"
    code = ("import sys; from estratos.cli import main; sys.argv=['estratos', 'encode', "
            "'--model', 'm', '--sentences', 'missing.txt', '--max-length', '1', '--out', "
            f"{str(out)!r}]; "
            "import atexit; atexit.register(lambda: print('torch' in sys.modules, "
            "file=sys.stderr)); main()")
    import subprocess

    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("Error: --max-length: must be an integer >= 2"), res.stderr
    assert lines[-1] == "False"  # torch never loaded
    assert not out.exists() and not list(tmp_path.glob("c.h5*"))


def test_the_cli_and_the_library_build_the_same_configuration(tmp_path, monkeypatch):
    """The encode command hands encode_sentences the configuration its options build."""
    seen = {}

    def fake(sentences, config, out, **kwargs):
        seen["config"] = config
        raise SystemExit(0)

    import estratos.encode.run

    monkeypatch.setattr(estratos.encode.run, "encode_sentences", fake, raising=True)
    src = tmp_path / "s.txt"
    src.write_text("uno\n", encoding="utf-8")
    words = EncodeConfig.build(model="some/model", **CHANGED).to_argv()
    CliRunner().invoke(cli, ["encode", *words, "--sentences", str(src), "--out",
                             str(tmp_path / "c.h5")])
    assert seen["config"] == EncodeConfig.build(model="some/model", shard="auto", **CHANGED)


@pytest.mark.parametrize("attrs, words", [
    ({"encoder": "transformers", "model": "m", "architecture": "decoder",
      "poolings": ["last", "mean"], "mean_first_token": "skip", "max_length": 512,
      "dtype": "bfloat16", "model_dtype": "bfloat16", "states": [0, 1, 2], "n_states": 3,
      "lowercase": False},
     ["--model", "m", "--dtype", "bfloat16", "--max-length", "512",
      "--model-dtype", "bfloat16"]),
    ({"encoder": "transformers", "model": "m", "architecture": "decoder",
      "poolings": ["mean"], "mean_first_token": "keep", "max_length": 64, "dtype": "float16",
      "model_dtype": "float32", "states": [0, 2], "n_states": 3, "prompt": "Frase: {}",
      "prompt_kind": "text", "random_init": 5, "lowercase": True},
     ["--model", "m", "--pooling", "mean", "--states", "0,2", "--max-length", "64",
      "--lowercase", "--prompt", "Frase: {}", "--mean-first-token", "keep",
      "--model-dtype", "float32", "--random-init", "5"]),
    ({"encoder": "transformers", "model": "m", "architecture": "decoder",
      "poolings": ["last", "mean"], "prompt": "<|user|>{}<|assistant|>",
      "prompt_kind": "chat-template", "max_length": 32, "dtype": "float16",
      "unrecorded": ["model_dtype"]},
     ["--model", "m", "--max-length", "32", "--chat-template"]),
    ({"encoder": "batcher", "model": "pkg.mod:batcher", "max_length": 0, "dtype": "float32",
      "lowercase": True, "poolings": ["encoder"]},
     ["--encoder", "pkg.mod:batcher", "--dtype", "float32", "--lowercase"]),
])
def test_for_cache_gives_the_options_that_add_rows_to_that_cache(attrs, words):
    """Each recorded setting a vector depends on, at its default when it is the default
    (an encoder's or decoder's own poolings, a decoder's skipped first token, every state)."""
    assert EncodeConfig.for_cache(attrs).to_argv() == words
    assert _config_from_words(words) == EncodeConfig.for_cache(attrs)
