"""Storage that cannot overflow: ``--dtype float16|bfloat16|float32``.

float16 ends at 65,504 and hidden states of some LLMs go beyond: a model whose last layer is
scaled up stands in for them. Under float16 its encode stops at once with an error naming
``--dtype bfloat16``; under bfloat16 it round-trips through every reader as float32.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from estratos.cache import open_cache, schema, verify_cache
from estratos.cli import cli
from tests.test_encode import make_sentences, single_thread  # noqa: F401 (autouse)

SCALE = 1e6


def scaled_model(src: Path, dest: Path, *, scale: float = SCALE, nan: bool = False) -> Path:
    """The tiny BERT with its last layer's output LayerNorm scaled (values ~1e6, beyond
    float16), or set to NaN."""
    import shutil

    from transformers import BertModel

    shutil.copytree(src, dest)
    model = BertModel.from_pretrained(src).eval()
    norm = model.encoder.layer[-1].output.LayerNorm
    with torch.no_grad():
        if nan:
            norm.bias[0] = float("nan")
        else:
            norm.weight.mul_(scale)
            norm.bias.mul_(scale)
    model.save_pretrained(dest)
    return dest


def encode(model: Path, out: Path, src: Path, *extra: str):
    return CliRunner().invoke(cli, ["encode", "--model", str(model), "--out", str(out),
                                    "--sentences", str(src), "--threads", "1",
                                    "--batch-tokens", "300", *extra])


@pytest.fixture
def sentences(tmp_path: Path) -> Path:
    path = tmp_path / "s.txt"
    path.write_text("\n".join(make_sentences(120, seed=5)) + "\n", encoding="utf-8")
    return path


def test_bfloat16_words_round_to_nearest_even_like_torch():
    values = np.array([1.0, -2.5, 3.14159, 65504.0, 1e6, -7e37, 1e-30, 0.0,
                       1.00390625, 1.01171875], dtype=np.float32)  # two exact ties
    words = schema.to_storage(values, "bfloat16")
    want = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(words, want)
    np.testing.assert_array_equal(schema.to_float32(words, "bfloat16"),
                                  torch.from_numpy(values).to(torch.bfloat16).float().numpy())
    assert schema.nonfinite_rows(schema.to_storage(np.array([[np.inf], [1.0], [np.nan]],
                                                            dtype=np.float32), "bfloat16"),
                                 "bfloat16").tolist() == [True, False, True]


def test_overflow_is_caught_under_float16_and_round_trips_under_bfloat16(
        tiny_bert_dir, tmp_path, sentences):
    model = scaled_model(tiny_bert_dir, tmp_path / "loud")
    out = tmp_path / "c.h5"
    result = encode(model, out, sentences, "--dtype", "float16")
    assert result.exit_code == 2, result.output
    assert "--dtype bfloat16" in result.output and "65504" in result.output
    assert "hidden state 2" in result.output  # the scaled layer, named
    # nothing half-written: no cache, no .partial, no lock
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loud", "s.txt"]

    result = encode(model, out, sentences, "--dtype", "bfloat16")
    assert result.exit_code == 0, result.output
    exact = tmp_path / "exact.h5"
    assert encode(model, exact, sentences, "--dtype", "float32").exit_code == 0
    with h5py.File(out, "r") as f:
        assert f.attrs["dtype"] == "bfloat16" and f["vectors/cls"].dtype == np.uint16
    with open_cache(out) as c, open_cache(exact) as e:
        assert c.identity()["dtype"] == "bfloat16"
        rows = c.rows_for(e.sentences())
        for pooling in ("cls", "mean"):
            got, want = c.read(rows, pooling), e.read(np.arange(e.n_rows), pooling)
            assert got.dtype == np.float32 and np.isfinite(got).all()
            assert np.abs(want[:, 2]).max() > 1e5  # really beyond float16
            # bfloat16 keeps 8 significant bits: relative error at most 2^-9
            np.testing.assert_allclose(got, want, rtol=2.0 ** -8, atol=1e-30)
    report = verify_cache(out)
    assert report.ok, report.summary()


def test_model_nan_is_refused_in_any_dtype(tiny_bert_dir, tmp_path, sentences):
    model = scaled_model(tiny_bert_dir, tmp_path / "nan", nan=True)
    for dtype in ("float32", "bfloat16"):
        out = tmp_path / f"{dtype}.h5"
        result = encode(model, out, sentences, "--dtype", dtype)
        assert result.exit_code == 1, result.output
        assert "NaN or infinite hidden states" in result.output and "hidden state 2" in result.output
        assert not out.exists() and not schema.partial_path(out).exists()


def test_bfloat16_shards_merge_and_verify(tiny_bert_dir, tmp_path, sentences):
    out = tmp_path / "c.h5"
    for i in range(2):
        result = encode(tiny_bert_dir, out, sentences, "--dtype", "bfloat16", "--shard", f"{i}/2")
        assert result.exit_code == 0, result.output
    whole = tmp_path / "whole.h5"
    assert encode(tiny_bert_dir, whole, sentences, "--dtype", "bfloat16").exit_code == 0
    merged = tmp_path / "merged.h5"
    result = CliRunner().invoke(cli, ["cache", "merge", "--out", str(merged),
                                      *map(str, sorted(tmp_path.glob("c.shard-*.h5")))])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["cache", "verify", str(merged)])
    assert result.exit_code == 0 and "OK" in result.output, result.output
    with open_cache(merged) as m, open_cache(whole) as w:
        rows = m.rows_for(w.sentences())
        np.testing.assert_array_equal(m.read(rows, "mean"), w.read(np.arange(w.n_rows), "mean"))


def test_only_batches_beyond_the_stored_range_are_checked_row_by_row():
    """The write thread checks a batch row by row only when its largest magnitude (reduced
    on the device) is beyond the stored precision's maximum; a value that still rounds to
    that maximum is then stored, one that does not stops the run."""
    from estratos.encode.models.hf import HostVectors
    from estratos.encode.stream import refuse_nonfinite

    def host(values, dtype="float16"):
        full = torch.tensor(values, dtype=torch.float32).reshape(1, 1, -1)
        out = getattr(torch, dtype)
        vectors = HostVectors({"cls": full.to(out)}, {"cls": full.mean(dim=1).to(out)},
                              torch.device("cpu"), full.abs().amax(), schema.DTYPE_MAX[dtype])
        return vectors, vectors.numpy()

    calm, _ = host([1.0, -3.0])
    assert calm.source_finite and calm.within_range
    edge, stored = host([65510.0, 1.0])  # above float16's maximum, rounds down to it
    assert edge.source_finite and not edge.within_range
    refuse_nonfinite(stored, edge.averages, "float16", edge.source_finite, ["una frase"])
    assert stored["cls"].max() == np.float16(65504.0)
    loud, stored = host([70000.0, 1.0])  # becomes inf in float16
    assert not loud.within_range
    with pytest.raises(Exception, match="--dtype bfloat16"):
        refuse_nonfinite(stored, loud.averages, "float16", loud.source_finite, ["una frase"])
    broken, _ = host([float("nan"), 1.0], "float32")
    assert not broken.source_finite and not broken.within_range
    wide, _ = host([3.39e38], "bfloat16")  # beyond bfloat16's maximum, within float32's
    assert not wide.within_range
