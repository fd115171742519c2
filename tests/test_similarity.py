"""Similarity and geometry (issue 39): each measure against a plain reference written from
its formula on n x n matrices, the invariances and biases the literature states, the
streamed path against the one-shot one, and the commands' bad input."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from click.testing import CliRunner
from probe_toys import toy_sentences, write_cache

from estratos.cli import cli
from estratos.similarity import geometry as G
from estratos.similarity import measures as M
from estratos.similarity.streaming import CrossProducts, layer_moments

TOL = 1e-6


# ---- plain references (n x n Gram matrices, loops) -------------------------------------------

def _centre_gram(k):
    n = len(k)
    h = np.eye(n) - np.ones((n, n)) / n
    return h @ k @ h


def ref_linear_cka(x, y):
    k, l_ = _centre_gram(x @ x.T), _centre_gram(y @ y.T)
    return np.sum(k * l_) / math.sqrt(np.sum(k * k) * np.sum(l_ * l_))


def ref_hsic_u(k, l_):
    """Song et al. 2012, Theorem 2, written as it stands."""
    n = len(k)
    k, l_ = k.copy(), l_.copy()
    np.fill_diagonal(k, 0)
    np.fill_diagonal(l_, 0)
    one = np.ones(n)
    return (np.trace(k @ l_) + (one @ k @ one) * (one @ l_ @ one) / ((n - 1) * (n - 2))
            - 2.0 / (n - 2) * (one @ k @ l_ @ one)) / (n * (n - 3))


def ref_debiased_cka(x, y):
    k, l_ = x @ x.T, y @ y.T  # uncentred: the unbiased HSIC needs no centring
    return ref_hsic_u(k, l_) / math.sqrt(ref_hsic_u(k, k) * ref_hsic_u(l_, l_))


def ref_procrustes(x, y):
    """arccos of the nuclear norm of X^T Y over |X| |Y|: the singular values of X^T Y are the
    square roots of the eigenvalues of K_c L_c (n x n)."""
    k, l_ = _centre_gram(x @ x.T), _centre_gram(y @ y.T)
    eig = np.clip(np.linalg.eigvals(k @ l_).real, 0, None)
    return math.acos(min(1.0, np.sqrt(eig).sum() / math.sqrt(np.trace(k) * np.trace(l_))))


def ref_rsa(x, y):
    from scipy.spatial.distance import pdist
    from scipy.stats import spearmanr

    return spearmanr(pdist(x, "correlation"), pdist(y, "correlation"))[0]


def ref_mutual_knn(x, y, k):
    def sets(z):
        u = z / np.linalg.norm(z, axis=1, keepdims=True)
        out = []
        for i in range(len(u)):
            sim = [(-(u[i] @ u[j]), j) for j in range(len(u)) if j != i]
            out.append({j for _, j in sorted(sim)[:k]})
        return out

    return np.mean([len(a & b) / k for a, b in zip(sets(x), sets(y))])


def _standardize(x):
    return (x - x.mean(0)) / x.std(0)


def _related(seed=0, n=60, dx=12, dy=9):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dx)) * rng.uniform(0.2, 5.0, dx) + rng.normal(size=dx) * 3
    y = np.tanh(x @ rng.normal(size=(dx, dy))) + 0.5 * rng.normal(size=(n, dy)) + 7.0
    return x, y


def _orthogonal(d, rng):
    q, r = np.linalg.qr(rng.normal(size=(d, d)))
    return q * np.sign(np.diag(r))


# ---- invariances and biases ------------------------------------------------------------------

def test_cka_is_one_and_procrustes_zero_under_rotation_scale_and_shift():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(80, 24))
    y = 2.7 * x @ _orthogonal(24, rng) + rng.normal(size=24) * 10
    assert M.linear_cka(x, y).value == pytest.approx(1.0, abs=TOL)
    assert M.debiased_cka(x, y).value == pytest.approx(1.0, abs=TOL)
    assert M.procrustes_distance(x, y).value == pytest.approx(0.0, abs=TOL)


def test_debiased_cka_is_unbiased_on_independent_gaussians_and_biased_cka_is_not():
    biased, debiased = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        x, y = rng.normal(size=(64, 768)), rng.normal(size=(64, 768))
        biased.append(M.linear_cka(x, y).value)
        debiased.append(M.debiased_cka(x, y).value)
    se = np.std(debiased, ddof=1) / math.sqrt(len(debiased))
    assert abs(np.mean(debiased)) <= 2 * se
    assert np.mean(biased) > 0.5 and np.mean(biased) > 100 * se


def test_shuffling_one_sides_rows_drops_cka_to_about_zero():
    x, y = _related(1, n=2000)
    assert M.linear_cka(x, y).value > 0.3
    shuffled = y[np.random.default_rng(0).permutation(len(y))]
    assert M.linear_cka(x, shuffled).value < 0.02
    assert abs(M.debiased_cka(x, shuffled).value) < 0.02


@pytest.mark.parametrize("standardized", [False, True])
def test_each_measure_equals_its_plain_reference(standardized):
    x, y = _related(2)
    if standardized:
        x, y = _standardize(x), _standardize(y)
    assert M.linear_cka(x, y).value == pytest.approx(ref_linear_cka(x, y), abs=TOL)
    assert M.debiased_cka(x, y).value == pytest.approx(ref_debiased_cka(x, y), abs=TOL)
    assert M.procrustes_distance(x, y).value == pytest.approx(ref_procrustes(x, y), abs=TOL)
    assert M.rsa(x, y).value == pytest.approx(ref_rsa(x, y), abs=TOL)
    assert M.mutual_knn(x, y, 5).value == pytest.approx(ref_mutual_knn(x, y, 5), abs=TOL)


def test_a_negative_unbiased_hsic_is_reported_never_square_rooted():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 3)), rng.normal(size=(8, 3))
    found = [M.debiased_cka(x, rng.normal(size=(8, 3))) for _ in range(200)]
    negative = [v for v in found if v.value is not None and v.value < 0]
    assert negative and all(v.detail["hsic_xy"] < 0 for v in negative)
    assert M.debiased_cka(x, y).detail["hsic_xx"] > 0
    constant = M.debiased_cka(np.ones((8, 3)), y)
    assert constant.value is None and "not positive" in constant.undefined


# ---- streamed against one shot ---------------------------------------------------------------

def _chunks(layers, size):
    for lo in range(0, len(layers[0]), size):
        yield [x[lo:lo + size] for x in layers]


@pytest.mark.parametrize("two_caches", [False, True])
def test_streamed_products_equal_the_one_shot_measures(two_caches):
    x0, y0 = _related(4, n=101)
    x1, y1 = _related(5, n=101, dx=7, dy=5)
    xs, ys = [x0, x1], [y0, y1]
    mx = layer_moments(_chunks(xs, 13))
    my = layer_moments(_chunks(ys, 13)) if two_caches else None
    acc = CrossProducts(mx, my, "float64")
    for cx, cy in zip(_chunks(xs, 13), _chunks(ys, 13)):
        acc.add(cx, cy if two_caches else None)
    others = ys if two_caches else xs
    for standardized in (False, True):
        for i, j in ((0, 0), (0, 1), (1, 0)):
            x, y = xs[i], others[j]
            if standardized:
                x, y = _standardize(x), _standardize(y)
            s = acc.pair(i, j, standardized)
            for streamed, one_shot in ((M.linear_cka_stats, M.linear_cka),
                                       (M.debiased_cka_stats, M.debiased_cka),
                                       (M.procrustes_stats, M.procrustes_distance)):
                assert streamed(s).value == pytest.approx(one_shot(x, y).value, abs=TOL)


def test_float32_products_stay_close_to_float64():
    x, y = _related(6, n=3000)
    results = {}
    for products in ("float32", "float64"):
        acc = CrossProducts(layer_moments([[x]]), layer_moments([[y]]), products)
        for lo in range(0, 3000, 512):
            acc.add([x[lo:lo + 512]], [y[lo:lo + 512]])
        s = acc.pair(0, 0)
        results[products] = (M.linear_cka_stats(s).value,
                             M.procrustes_stats(s, exact=products == "float64").value)
    assert results["float32"] == pytest.approx(results["float64"], abs=1e-5)


@pytest.mark.parametrize("rank", [3, 40])
@pytest.mark.parametrize("shape", [(60, 40), (40, 60)])
def test_the_nuclear_norm_from_a_grams_eigenvalues_is_within_its_bound(rank, shape):
    rng = np.random.default_rng(rank)
    m = rng.normal(size=(shape[0], rank)) @ rng.normal(size=(rank, shape[1]))
    exact = M.nuclear_norm(m)
    assert exact == pytest.approx(np.linalg.svd(m, compute_uv=False).sum(), rel=1e-12)
    largest = np.linalg.norm(m, 2)
    bound = min(shape) * np.sqrt(np.finfo(float).eps) * largest
    assert abs(M.nuclear_norm(m, exact=False) - exact) <= bound


def test_procrustes_angles_near_zero_come_from_the_svd_whatever_the_precision():
    # a layer with itself: arccos would magnify the eigenvalue route's rounding
    x = np.random.default_rng(0).normal(size=(3000, 384)) * np.logspace(0, -6, 384) + 5
    s = M.PairStats.of(x, x)
    assert M.procrustes_stats(s, exact=False).value == M.procrustes_stats(s, exact=True).value


# ---- geometry --------------------------------------------------------------------------------

def _ball(n, dim, ambient, seed):
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(n, dim))
    g *= (rng.uniform(size=(n, 1)) ** (1 / dim)) / np.linalg.norm(g, axis=1, keepdims=True)
    q = np.linalg.qr(rng.normal(size=(ambient, dim)))[0]
    return g @ q.T


def test_twonn_of_a_five_dimensional_ball_in_768_dimensions_is_five():
    assert G.twonn(_ball(2000, 5, 768, 0)).value == pytest.approx(5.0, abs=0.5)


def test_exact_duplicates_are_dropped_counted_and_never_give_nan():
    x = _ball(300, 3, 20, 1)
    found = G.twonn(np.vstack([x, x[:40], x[:5]]))
    assert found.detail["duplicates"] == 45 and math.isfinite(found.value)
    same = np.repeat(x[:1], 50, axis=0)
    for value in (G.twonn(same), M.rsa(same, x[:50]), M.linear_cka(same, x[:50]),
                  M.debiased_cka(same, x[:50]), M.procrustes_distance(same, x[:50]),
                  M.mutual_knn(same, x[:50], 5)):
        assert value.value is None or math.isfinite(value.value)
    assert G.twonn(same).value is None and M.linear_cka(same, x[:50]).value is None


def test_mutual_knn_of_a_constant_layer_is_undefined_not_tie_breaking():
    """A constant layer (MiniLM's layer-0 [CLS]: one vector for every sentence) has no
    nearest neighbours: every sentence is equally near every other, so any set is
    tie-breaking's. Before, it scored 1.0 with itself and 0.004-0.010 with other layers."""
    x = _ball(300, 3, 20, 1)[:60]
    same = np.repeat(x[:1], 60, axis=0)
    for other in (same, x):
        value = M.mutual_knn(same, other, 5)
        assert value.value is None and "tied" in value.undefined
    assert M.knn_sets(x, 5).tied == 0 and M.mutual_knn(x, x, 5).value == 1.0
    # one sentence whose 5th and 6th neighbours are equally near makes the sets undefined
    ring = np.array([[math.cos(a), math.sin(a)] for a in np.linspace(0, 2 * math.pi, 13)[:-1]])
    assert M.knn_sets(ring, 1).tied > 0


def test_the_anisotropy_of_identical_rows_is_one_never_past_it():
    # float32 unit rows of one repeated vector: their mean cosine is 1 (to rounding), never
    # 1 + rounding
    from estratos.similarity.streaming import layer_moments

    for seed in range(20):
        row = np.random.default_rng(seed).normal(size=(1, 384)).astype(np.float32) * 7.3
        rows = np.repeat(row, 3000, axis=0)
        acc = G.GeometryAccumulator(layer_moments([[rows]]))
        acc.add([rows])
        assert 1.0 - 1e-7 < acc.measures(0, False, rows[:100])["anisotropy"].value <= 1.0


def test_the_anisotropy_of_two_opposite_rows_is_its_lower_bound_never_past_it():
    from estratos.similarity.streaming import layer_moments

    for seed in range(20):
        row = np.random.default_rng(seed).normal(size=(1, 64)).astype(np.float32) * 3.1
        rows = np.vstack([row, -row])
        acc = G.GeometryAccumulator(layer_moments([[rows]]))
        acc.add([rows])
        value = acc.measures(0, False, rows)["anisotropy"].value
        assert -1.0 <= value < -1.0 + 1e-6  # the mean cosine of m = 2 rows: -1 / (m - 1)


def test_geometry_measures_equal_their_plain_references():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(120, 10)) + np.r_[4.0, np.zeros(9)]
    acc = G.GeometryAccumulator(layer_moments(_chunks([x], 17)), "float64")
    for c in _chunks([x], 17):
        acc.add(c)
    found = acc.measures(0, False, x)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    pairs = [(i, j) for i in range(120) for j in range(120) if i != j]
    cosines = [u[i] @ u[j] for i, j in pairs]
    assert found["anisotropy"].value == pytest.approx(np.mean(cosines), abs=TOL)
    share0 = np.mean([u[i, 0] * u[j, 0] for i, j in pairs]) / np.mean(cosines)
    top = found["anisotropy"].detail["top_dims"][0]
    assert top["dim"] == 0 and top["share"] == pytest.approx(share0, abs=TOL)
    eig = np.linalg.eigvalsh(np.cov(x.T, bias=True))
    p = eig / eig.sum()
    assert found["effective-rank"].value == pytest.approx(math.exp(-(p * np.log(p)).sum()),
                                                          abs=TOL)
    assert found["max-abs"].value == pytest.approx(np.abs(x).max())
    assert found["norm"].value == pytest.approx(np.linalg.norm(x, axis=1).mean())
    standardized = acc.measures(0, True, x)
    z = _standardize(x)
    eig = np.linalg.eigvalsh(np.corrcoef(x.T))
    p = eig / eig.sum()
    assert standardized["effective-rank"].value == pytest.approx(
        math.exp(-(p * np.log(p)).sum()), abs=TOL)
    assert standardized["max-abs"].value == pytest.approx(np.abs(z).max())


# ---- the commands ----------------------------------------------------------------------------

@pytest.fixture
def caches(tmp_path):
    rng = np.random.default_rng(0)
    sentences = toy_sentences(120)
    vec = rng.normal(size=(120, 3, 8)).astype(np.float32)
    other = (vec[::-1] @ rng.normal(size=(8, 6))).astype(np.float32)
    a = write_cache(tmp_path / "a.h5", sentences, vec)
    b = write_cache(tmp_path / "b.h5", sentences[::-1], other, model="test/other")
    listed = tmp_path / "s.txt"
    listed.write_text("\n".join(sentences[:100]) + "\n", encoding="utf-8")
    return a, b, listed, vec


def _run(args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_similarity_joins_rows_on_the_sentence_key_and_resumes(caches, tmp_path):
    a, b, listed, _ = caches
    out = tmp_path / "sim.jsonl"
    args = ["similarity", "--cache", a, "--other", b, "--sentences", listed, "--out", out,
            "--max-sentences", 50, "--products", "float64"]
    first = _run(args)
    assert first.exit_code == 0, first.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 5 * 2 * 3 * 3  # measures x features x layers x layers
    cka = {(r["layer_a"], r["layer_b"], r["features"]): r["value"] for r in lines
           if r["measure"] == "linear-cka"}
    # b's rows are a's in reverse order times a matrix: joined by key, layer i of b is a
    # linear map of layer i of a
    assert cka[(1, 1, "raw")] > 0.5 > cka[(1, 0, "raw")]
    sample = next(r["sample"] for r in lines if r["measure"] == "rsa")
    assert sample == {"size": 50, "of": 100, "seed": 1111}
    again = _run(args)
    assert again.exit_code == 0 and "wrote 0" in again.output and "90 already" in again.output
    redo = _run(args + ["--overwrite"])
    rerun = [json.loads(line) for line in out.read_text().splitlines()][len(lines):]
    assert redo.exit_code == 0 and [r["value"] for r in rerun] == [r["value"] for r in lines]


def test_geometry_and_report_draw_the_records(caches, tmp_path):
    pytest.importorskip("matplotlib")
    a, _, listed, _ = caches
    sim, geo = tmp_path / "sim.jsonl", tmp_path / "geo.jsonl"
    assert _run(["similarity", "--cache", a, "--sentences", listed, "--out", sim,
                 "--measures", "linear-cka,rsa", "--features", "raw"]).exit_code == 0
    result = _run(["geometry", "--cache", a, "--sentences", listed, "--out", geo])
    assert result.exit_code == 0, result.output
    assert len(geo.read_text().splitlines()) == 5 * 2 * 3
    report = tmp_path / "report"
    result = _run(["report", "--out", report, "--similarity", sim, "--similarity", geo,
                   "--plot"])
    assert result.exit_code == 0, result.output
    text = (report / "report.md").read_text()
    assert "Similarity: most similar layers" in text and "## Geometry" in text
    page = (report / "report.html").read_text()
    assert "data:image/png;base64" in page and "similarity_0_" in page


@pytest.mark.parametrize("extra, message, code", [
    (["--layers", "7"], "--layers: layer index 7 is out of range", 2),
    (["--pooling", "last"], "has no pooling 'last'", 2),
    (["--max-sentences", "0"], "--max-sentences", 2),
    (["--measures", "cca"], "--measures: unknown measure 'cca'", 2),
])
def test_bad_options_are_one_error_line_and_write_nothing(caches, tmp_path, extra, message,
                                                          code):
    a, b, listed, _ = caches
    out = tmp_path / "sim.jsonl"
    result = _run(["similarity", "--cache", a, "--other", b, "--sentences", listed, "--out",
                   out, *extra])
    assert result.exit_code == code, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], result.output
    assert not out.exists()


def test_a_cache_lacking_sentences_is_refused_with_the_count_and_the_encode_command(
        caches, tmp_path):
    a, _, _, vec = caches
    c = write_cache(tmp_path / "c.h5", toy_sentences(120)[:70], vec[:70], model="test/c")
    listed = tmp_path / "s.txt"
    out = tmp_path / "sim.jsonl"
    for command in (["similarity", "--other", c], ["geometry"]):
        cache = a if command[0] == "similarity" else c
        result = _run([command[0], "--cache", cache, *command[1:], "--sentences", listed,
                       "--out", out])
        assert result.exit_code == 1, result.output
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "30 of the 100 sentences are not in this cache" in errors[0]
        assert (f"estratos encode --model test/c --dtype float32 --max-length 128 "
                f"--sentences {listed} --out {c}") in errors[0]
        assert not out.exists()


def test_caches_with_no_sentence_in_common_are_refused(caches, tmp_path):
    a, _, listed, vec = caches
    other = write_cache(tmp_path / "o.h5", toy_sentences(100, stem="otra"), vec[:100],
                        model="test/o")
    out = tmp_path / "sim.jsonl"
    result = _run(["similarity", "--cache", a, "--other", other, "--sentences", listed,
                   "--out", out])
    assert result.exit_code == 1 and "100 of the 100 sentences" in result.output
    assert not out.exists()


def test_records_hold_no_nan_for_constant_layers(tmp_path):
    sentences = toy_sentences(30)
    vec = np.zeros((30, 2, 4), dtype=np.float32)
    vec[:, 1] = np.random.default_rng(0).normal(size=(30, 4))
    cache = write_cache(tmp_path / "z.h5", sentences, vec)
    listed = tmp_path / "s.txt"
    listed.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    for command in ("similarity", "geometry"):
        out = tmp_path / f"{command}.jsonl"
        result = _run([command, "--cache", cache, "--sentences", listed, "--out", out,
                       "--max-sentences", 20])
        assert result.exit_code == 0, result.output
        text = out.read_text()
        assert "NaN" not in text and "Infinity" not in text
        records = [json.loads(line) for line in text.splitlines()]
        undefined = [r for r in records if r["value"] is None]
        assert undefined and all(r["undefined"] for r in undefined)


@pytest.mark.parametrize("kept", [True, False])
@pytest.mark.parametrize("itself", [False, True])
def test_pearson_matrix_equals_pearson_rows_pair_by_pair(monkeypatch, kept, itself):
    from estratos.stats import metrics
    from estratos.stats.metrics import pearson_matrix, pearson_rows

    if not kept:  # the second stack normalised again for every block of the first
        monkeypatch.setattr(metrics, "KEPT_UNIT_BYTES", 0)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 40)), rng.normal(size=(3, 40))
    x[2] = 7.0  # a constant row: undefined
    if itself:
        y = x
    found = pearson_matrix(x, y, block=2)
    for i in range(5):
        for j in range(len(y)):
            expected = pearson_rows(x[i], y[j])
            assert (np.isnan(found[i, j]) and np.isnan(expected)) or \
                found[i, j] == pytest.approx(expected, abs=1e-12)
    assert np.isnan(found[2]).all()


@pytest.mark.parametrize("values", [
    np.random.default_rng(1).normal(size=1000),                    # no ties
    np.random.default_rng(2).integers(0, 20, size=1000) / 7.0,     # many ties
    np.array([3.0]), np.array([2.0, 2.0, 2.0]), np.array([])])
def test_average_ranks_1d_equals_scipys_average_ranks(values):
    from scipy.stats import rankdata

    from estratos.stats.metrics import average_ranks_1d

    np.testing.assert_array_equal(average_ranks_1d(values), rankdata(values, method="average"))


def test_rsa_of_every_pair_at_once_equals_rsa_pair_by_pair():
    xs = [_related(s, n=40)[0] for s in range(3)]
    ranks = np.stack([M.rdm_ranks(x) for x in xs])
    found = M.rsa_matrix(ranks, ranks[:2])
    for i in range(3):
        for j in range(2):
            assert found[i][j].value == pytest.approx(M.rsa(xs[i], xs[j]).value, abs=TOL)


@pytest.mark.parametrize("chunk_rows", [4096, 7])
@pytest.mark.parametrize("two_caches", [True, False])
def test_subsample_rows_picked_in_the_moments_pass_equal_those_read_alone(
        caches, tmp_path, monkeypatch, chunk_rows, two_caches):
    # with the streamed measures the first pass picks the subsample's rows from its chunks
    # (7 rows a chunk: most chunks hold none of them); RSA and mutual k-NN alone on raw
    # features read them from the caches: same values
    from estratos.similarity import run

    monkeypatch.setattr(run, "CHUNK_ROWS", chunk_rows)
    a, b, listed, _ = caches
    common = ["similarity", "--cache", a, "--sentences", listed,
              "--max-sentences", 40, "--products", "float64"]
    if two_caches:
        common += ["--other", b]
    together, alone = tmp_path / "together.jsonl", tmp_path / "alone.jsonl"
    assert _run(common + ["--out", together]).exit_code == 0
    assert _run(common + ["--out", alone, "--measures", "rsa,mutual-knn",
                          "--features", "raw"]).exit_code == 0

    def sampled(path):
        return {(r["measure"], r["layer_a"], r["layer_b"]): r["value"]
                for r in map(json.loads, path.read_text().splitlines())
                if r["measure"] in ("rsa", "mutual-knn") and r["features"] == "raw"}

    assert sampled(together) == sampled(alone) and len(sampled(alone)) == 2 * 3 * 3


def test_each_keeps_the_order_and_restores_the_thread_counts_after_an_error():
    import torch
    from threadpoolctl import threadpool_info

    from estratos.similarity.run import _each

    before = (torch.get_num_threads(), [p["num_threads"] for p in threadpool_info()])
    assert _each(lambda v: v * v, list(range(50))) == [v * v for v in range(50)]

    def fail(v):
        if v == 3:
            raise ValueError("item 3")
        return v

    with pytest.raises(ValueError, match="item 3"):
        _each(fail, list(range(8)), item_bytes=1)
    assert (torch.get_num_threads(), [p["num_threads"] for p in threadpool_info()]) == before


def test_float32_products_keep_every_streamed_measure_close_to_float64():
    # standardized features, debiased CKA and Procrustes, one cache and two; and a layer
    # with itself keeps a Procrustes angle of about 0 (the SVD near 0, not the Gram's
    # eigenvalues)
    x0, y0 = _related(7, n=2000)
    x1 = x0 @ np.random.default_rng(8).normal(size=(x0.shape[1], 9))
    for ys in (None, [y0]):
        found = {}
        for products in ("float32", "float64"):
            mx = layer_moments([[x0, x1]])
            my = None if ys is None else layer_moments([ys])
            acc = CrossProducts(mx, my, products)
            for lo in range(0, 2000, 300):
                acc.add([x0[lo:lo + 300], x1[lo:lo + 300]],
                        None if ys is None else [y[lo:lo + 300] for y in ys])
            exact = products == "float64"
            found[products] = [
                fn(acc.pair(i, 0, standardized)).value
                for standardized in (False, True) for i in (0, 1)
                for fn in (M.linear_cka_stats, M.debiased_cka_stats,
                           lambda s, e=exact: M.procrustes_stats(s, exact=e))]
            if ys is None:
                for standardized in (False, True):
                    angle = M.procrustes_stats(acc.pair(1, 1, standardized), exact=exact)
                    assert angle.value < 1e-6
        assert found["float32"] == pytest.approx(found["float64"], abs=1e-5)


def test_an_offset_dimension_carries_anisotropy_but_no_variance():
    """Issue 48, item 2: a dimension constant over every sentence (an offset, as MiniLM's
    [CLS] dimension 99 at layers 1-3) carries most of the anisotropy and none of the
    variance; the geometry record says both, and names the dimensions of largest variance."""
    import numpy as np

    from estratos.similarity.geometry import _Layer, anisotropy

    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 8))
    x[:, 3] = 40.0  # the offset
    layer = _Layer(8)
    layer.add(x)
    value = anisotropy(layer, x.var(axis=0))
    first = value.detail["top_dims"][0]
    assert first["dim"] == 3 and first["share"] > 0.9
    assert first["variance_share"] == 0.0
    assert value.detail["top_variance_dims"][0]["dim"] != 3
    assert abs(sum(d["variance_share"] for d in value.detail["top_variance_dims"]) - 3 / 7) < 0.1


def test_variance_and_gram_shares_equal_their_plain_references_and_an_offset_holds_none():
    """Issue 48, item 2: through the streamed accumulator, each named dimension's share of
    the variance (of the centred Gram's trace) and of the centred Gram's squared Frobenius
    norm (linear CKA's normalisation) equal their n x n references; a dimension with one
    large value in every sentence (an offset) carries most of the anisotropy and the
    largest activation, and none of the variance or the Gram."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=(300, 12)) * np.linspace(0.5, 3.0, 12)
    x[:, 5] = 60.0  # the offset: same value in every sentence
    acc = G.GeometryAccumulator(layer_moments(_chunks([x], 64)), "float64")
    for c in _chunks([x], 64):
        acc.add(c)
    found = acc.measures(0, False, x)
    xc = x - x.mean(0)
    xc[:, 5] = 0.0
    k = xc @ xc.T  # the centred Gram, n x n
    var_ref = np.array([xc[:, j] @ xc[:, j] for j in range(12)]) / np.trace(k)
    gram_ref = np.array([xc[:, j] @ k @ xc[:, j] for j in range(12)]) / np.sum(k * k)
    aniso, act = found["anisotropy"], found["max-abs"]
    offset = aniso.detail["top_dims"][0]
    assert offset["dim"] == 5 and offset["share"] > 0.9
    assert offset["variance_share"] == 0.0 and offset["gram_share"] == 0.0
    assert act.detail["dim"] == 5 and act.detail["variance_share"] == 0.0
    assert act.detail["gram_share"] == 0.0 and act.detail["ratio"] > 10
    for d in aniso.detail["top_dims"] + aniso.detail["top_variance_dims"]:
        assert d["variance_share"] == pytest.approx(var_ref[d["dim"]], abs=TOL)
        assert d["gram_share"] == pytest.approx(gram_ref[d["dim"]], abs=TOL)
    assert [d["dim"] for d in aniso.detail["top_variance_dims"]] == list(
        np.argsort(-var_ref)[:3])
    # a constant layer has no variance to share: no shares, no dimension of largest share
    still = np.repeat(x[:1], 50, axis=0)
    acc = G.GeometryAccumulator(layer_moments([[still]]), "float64")
    acc.add([still])
    constant = acc.measures(0, False, still)
    assert constant["anisotropy"].detail["top_variance_dims"] == []
    assert constant["anisotropy"].detail["top_dims"][0]["variance_share"] is None
    assert constant["max-abs"].detail["gram_share"] is None
    # dropping the offset leaves CKA with any other layer unchanged: CKA centres it away
    y = x @ rng.normal(size=(12, 7))
    assert M.linear_cka(np.delete(x, 5, axis=1), y).value == pytest.approx(
        M.linear_cka(x, y).value, abs=1e-12)


# ---- linear CKA on resampled sentences (issue 48, item 5) ------------------------------------

def test_resampled_cka_equals_cka_of_the_resampled_rows():
    from estratos.similarity import bootstrap as B

    x, y = _related(9, n=150)
    z = x[:, :5] ** 2
    weights = np.vstack([np.ones((1, 150), np.float32), B.resample_weights(150, 6, 3)])
    assert (weights.sum(axis=1) == 150).all()
    two = B.resampled_cka([x, z], [y], weights)
    one = B.resampled_cka([x, z, y], None, weights)
    for b in range(7):
        rows = np.repeat(np.arange(150), weights[b].astype(int))
        for i, a in enumerate((x, z)):
            expected = ref_linear_cka(a[rows], y[rows])
            assert two[b, i, 0] == pytest.approx(expected, abs=1e-6)
            assert one[b, i, 2] == pytest.approx(expected, abs=1e-6)
        assert one[b, 0, 0] == pytest.approx(1.0, abs=1e-6)
    again = B.resample_weights(150, 6, 3)
    assert (again == weights[1:]).all()
    assert not (B.resample_weights(150, 6, 4) == weights[1:]).all()


def test_a_close_runner_up_is_a_tie_and_a_distant_one_is_not():
    """Row 0 of x against three layers: y0 and y1 equally related to x (a tie whichever
    wins), y2 much less (never tied); the interval holds the value over every sentence."""
    from estratos.similarity import bootstrap as B

    rng = np.random.default_rng(5)
    n = 400
    x = rng.normal(size=(n, 6))
    ys = [x @ rng.normal(size=(6, 6)) + 1.0 * rng.normal(size=(n, 6)) for _ in range(2)]
    ys.append(x @ rng.normal(size=(6, 6)) + 6.0 * rng.normal(size=(n, 6)))
    weights = B.resample_weights(n, 300, 0)
    drawn = B.resampled_cka([x], ys, weights)
    full = np.array([[M.linear_cka(x, y).value for y in ys]])
    found = B.cka_intervals(full, drawn, n, n, within=False)[0]
    best = int(np.argmax(full[0, :2]))
    assert found[best]["best"] and found[1 - best]["tie"] and not found[2]["tie"]
    assert found[2]["difference"]["lo"] > 0
    for j, entry in enumerate(found):
        assert entry["lo"] <= full[0, j] <= entry["hi"] and entry["resamples"] == 300
        assert entry["level"] == 0.95 and entry["scale"] == 1.0
    # a subsample of m of n sentences: the spread is rescaled by sqrt(m / n)
    scaled = B.cka_intervals(full, drawn, n, 4 * n, within=False)[0]
    assert scaled[2]["scale"] == 0.5
    assert scaled[2]["hi"] - scaled[2]["lo"] == pytest.approx(
        (found[2]["hi"] - found[2]["lo"]) / 2, rel=1e-9)


def test_similarity_records_linear_ckas_interval_and_ties_seeded(caches, tmp_path):
    a, b, listed, _ = caches
    common = ["similarity", "--cache", a, "--other", b, "--sentences", listed,
              "--measures", "linear-cka,rsa", "--max-sentences", 60, "--bootstrap", 50]
    first, second = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert _run(common + ["--out", first]).exit_code == 0
    assert _run(common + ["--out", second]).exit_code == 0
    records = [json.loads(line) for line in first.read_text().splitlines()]
    assert first.read_text().count('"bootstrap"') == second.read_text().count('"bootstrap"')
    cka = [r for r in records if r["measure"] == "linear-cka"]
    for r in cka:
        boot = r["detail"]["bootstrap"]
        assert r["settings"]["bootstrap"] == {"resamples": 50, "seed": 0, "level": 0.95,
                                              "size": 60, "sample_seed": 1111}
        assert boot["lo"] <= r["value"] <= boot["hi"] and boot["scale"] == pytest.approx(
            math.sqrt(60 / 100))
    assert [r["detail"] for r in cka] == [
        json.loads(line)["detail"] for line in second.read_text().splitlines()
        if json.loads(line)["measure"] == "linear-cka"]
    for la in (0, 1, 2):  # one best per row, the others tied or not
        row = [r["detail"]["bootstrap"] for r in cka if r["layer_a"] == la
               and r["features"] == "raw"]
        assert sum(bool(d.get("best")) for d in row) == 1
        assert all("tie" in d for d in row if not d.get("best"))
    assert all("bootstrap" not in r["detail"] for r in records if r["measure"] == "rsa")
    other_seed = tmp_path / "three.jsonl"
    assert _run(common + ["--out", other_seed, "--bootstrap-seed", 7]).exit_code == 0
    seeded = [json.loads(line) for line in other_seed.read_text().splitlines()]
    assert {r["settings"]["bootstrap"]["seed"] for r in seeded
            if r["measure"] == "linear-cka"} == {7}
    none = tmp_path / "none.jsonl"
    assert _run(common + ["--out", none, "--bootstrap", 0]).exit_code == 0
    plain = [json.loads(line) for line in none.read_text().splitlines()]
    assert all("bootstrap" not in r["detail"] and "bootstrap" not in r["settings"]
               for r in plain)
    report = tmp_path / "report"
    assert _run(["report", "--out", report, "--similarity", first,
                 "--format", "md"]).exit_code == 0
    text = (report / "report.md").read_text()
    assert re.search(r"\d \(\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]", text), text


@pytest.mark.parametrize("extra, message", [
    (["--bootstrap", "-1"], "--bootstrap: must be at least 0, got -1"),
    (["--bootstrap", "x"], "'x' is not a valid integer"),
    (["--bootstrap-seed", "1.5"], "'1.5' is not a valid integer"),
])
def test_bad_bootstrap_options_are_one_error_line_and_write_nothing(caches, tmp_path, extra,
                                                                    message):
    a, b, listed, _ = caches
    out = tmp_path / "sim.jsonl"
    result = _run(["similarity", "--cache", a, "--other", b, "--sentences", listed, "--out",
                   out, *extra])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], result.output
    assert not out.exists()


# ---- a covariate regressed out: --residualize length (issue 48, item 4) ----------------------

def _length_caches(tmp_path, n=240):
    """Two caches of the same sentences, other tokenizers (token counts differ), whose
    layer 1 is length alone plus independent noise, and layer 0 shares a signal."""
    rng = np.random.default_rng(3)
    sentences = toy_sentences(n)
    na = rng.integers(3, 60, size=n)
    nb = np.maximum(1, (na * rng.uniform(0.8, 1.4, size=n)).astype(int))
    shared = rng.normal(size=(n, 4))
    length = np.stack([na, na ** 2 / 60.0, np.log(na)], axis=1)
    va = np.empty((n, 2, 6), dtype=np.float32)
    vb = np.empty((n, 2, 5), dtype=np.float32)
    va[:, 0] = np.c_[shared, rng.normal(size=(n, 2))]
    vb[:, 0] = shared @ rng.normal(size=(4, 5)) + 0.3 * rng.normal(size=(n, 5))
    va[:, 1] = length @ rng.normal(size=(3, 6)) + 0.05 * rng.normal(size=(n, 6))
    vb[:, 1] = np.log(nb)[:, None] * rng.normal(size=(1, 5)) + 0.05 * rng.normal(size=(n, 5))
    a = write_cache(tmp_path / "la.h5", sentences, va, n_tokens=na)
    b = write_cache(tmp_path / "lb.h5", sentences[::-1], vb[::-1], n_tokens=nb[::-1],
                    model="test/other")
    listed = tmp_path / "ls.txt"
    listed.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    return a, b, listed, va, vb, na, nb


def _residuals(x, covariates):
    design = np.c_[np.ones(len(x)), covariates]
    coef = np.linalg.lstsq(design, x, rcond=None)[0]
    return x - design @ coef


def test_residualize_length_takes_length_out_of_every_measure(tmp_path):
    a, b, listed, va, vb, na, nb = _length_caches(tmp_path)
    common = ["similarity", "--cache", a, "--other", b, "--sentences", listed,
              "--products", "float64", "--bootstrap", 20]
    plain, res = tmp_path / "plain.jsonl", tmp_path / "res.jsonl"
    assert _run(common + ["--out", plain]).exit_code == 0
    result = _run(common + ["--out", res, "--residualize", "length"])
    assert result.exit_code == 0, result.output

    def values(path):
        return {(r["measure"], r["features"], r["layer_a"], r["layer_b"]): r
                for r in map(json.loads, path.read_text().splitlines())}

    before, after = values(plain), values(res)
    # length's layers agree before (both are length), not after; the shared signal stays
    assert before[("linear-cka", "raw", 1, 1)]["value"] > 0.5
    assert after[("linear-cka", "raw", 1, 1)]["value"] < 0.1
    assert after[("linear-cka", "raw", 0, 0)]["value"] > 0.5
    # the residualized value is CKA of the least-squares residuals on both caches'
    # n, n^2, log n (an intercept too), computed one shot
    covariates = np.c_[na, na ** 2, np.log(na), nb, nb ** 2, np.log(nb)].astype(float)
    for i in (0, 1):
        for j in (0, 1):
            x, y = _residuals(va[:, i], covariates), _residuals(vb[:, j], covariates)
            r = after[("linear-cka", "raw", i, j)]
            assert r["value"] == pytest.approx(M.linear_cka(x, y).value, abs=1e-5)
            assert r["settings"]["residualize"] == "length"
            assert r["detail"]["bootstrap"]["lo"] <= r["value"] <= r["detail"]["bootstrap"]["hi"]
            explained = r["detail"]["residualized"]
            xa = va[:, i].astype(float)
            total = ((xa - xa.mean(0)) ** 2).sum()
            assert explained["explained_a"] == pytest.approx(
                1 - (_residuals(xa, covariates) ** 2).sum() / total, abs=1e-5)
            assert explained["covariates"] == 6
            assert after[("rsa", "raw", i, j)]["settings"]["residualize"] == "length"
    assert all("residualize" not in r["settings"] and "residualized" not in r["detail"]
               for r in before.values())
    # both in one file are two maps, not one: the report shows them apart
    both = tmp_path / "both.jsonl"
    both.write_text(plain.read_text() + res.read_text(), encoding="utf-8")
    report = tmp_path / "report"
    assert _run(["report", "--out", report, "--similarity", both,
                 "--format", "md"]).exit_code == 0
    text = (report / "report.md").read_text()
    assert "length regressed out" in text


def test_one_tokenizer_gives_three_covariates_and_a_constant_length_none():
    from estratos.similarity.residualize import length_covariates, orthonormal_basis

    counts = np.array([3, 5, 8, 13, 21, 34])
    basis = orthonormal_basis(length_covariates([counts, counts]))
    assert basis.shape == (6, 3)
    assert np.allclose(basis.T @ basis, np.eye(3)) and np.allclose(basis.sum(axis=0), 0)
    assert orthonormal_basis(length_covariates([np.full(6, 7)])).shape == (6, 0)


def test_a_bad_residualize_is_one_error_line_and_writes_nothing(caches, tmp_path):
    a, b, listed, _ = caches
    out = tmp_path / "sim.jsonl"
    result = _run(["similarity", "--cache", a, "--other", b, "--sentences", listed, "--out",
                   out, "--residualize", "lenght"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "--residualize" in errors[0] and "length" in errors[0]
    assert not out.exists()
    result = _run(["geometry", "--cache", a, "--sentences", listed, "--out", out,
                   "--residualize", "length"])
    assert result.exit_code == 2 and not out.exists()
