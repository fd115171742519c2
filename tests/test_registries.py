"""Every registry has one shape (estratos.registry): registration order, one lookup error
with the near-miss hint, a name defined once, and estimators that register themselves."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from estratos.errors import InputError, OptionError, TaskError
from estratos.registry import Registry, closest, unknown_name


def test_registry_keeps_registration_order_and_refuses_a_second_object():
    reg: Registry[int] = Registry("thing")
    for name, value in (("zeta", 1), ("alpha", 2), ("mid", 3)):
        reg.register(name, value)
    assert reg.names() == ("zeta", "alpha", "mid") and list(reg) == list(reg.names())
    assert reg.register("alpha", 2) == 2  # the same entry again is harmless
    with pytest.raises(ValueError, match="thing 'alpha' registered twice"):
        reg.register("alpha", 5)
    with pytest.raises(ValueError, match="needs a name"):
        reg.register("", 5)
    assert reg["zeta"] == 1 and reg.find("nope") is None and "mid" in reg and len(reg) == 3
    reg.unregister("mid")
    assert reg.names() == ("zeta", "alpha")


def test_lookup_error_is_one_message_with_the_closest_names():
    reg = Registry("thing", {"senteval": 1, "lbfgs": 2})
    with pytest.raises(TaskError) as task_error:
        reg.get("sentevl")
    assert str(task_error.value) == ("unknown thing 'sentevl' (closest: senteval); choose from "
                                     "senteval, lbfgs")
    with pytest.raises(OptionError) as option_error:
        reg.get("sentevl", option="--classifier")
    assert option_error.value.cli_text() == f"--classifier: {task_error.value}"
    assert option_error.value.exit_code == 2 and task_error.value.exit_code == 1
    # no near miss: only the choices
    assert str(unknown_name("thing", "qqq", ("a", "b"))) == "unknown thing 'qqq'; choose from a, b"
    assert closest("tas", ["TASS1", "STS17"]) == ["TASS1"]


@pytest.mark.parametrize("lookup, message", [
    (lambda: __import__("estratos.protocols", fromlist=["x"]).get_protocol("kfld"),
     "unknown protocol 'kfld' (closest: kfold, inner-kfold); choose from split, kfold, "
     "inner-kfold, cosine, relatedness"),
    (lambda: __import__("estratos.tasks.formats", fromlist=["x"]).get_format("jsnl"),
     "unknown data format 'jsnl' (closest: jsonl"),
    (lambda: __import__("estratos.vocab", fromlist=["x"]).COMBINERS["pairs"],
     "unknown combiner 'pairs' (closest: pair, pair4"),
    (lambda: __import__("estratos.vocab", fromlist=["x"]).METRIC_INFO["acuracy"],
     "unknown metric 'acuracy' (closest: accuracy); choose from accuracy, f1, pearson, "
     "spearman"),
    (lambda: __import__("estratos.probe.features", fromlist=["x"]).combine("tripl", []),
     "unknown combiner 'tripl'"),
])
def test_every_registry_answers_an_unknown_name_the_same_way(lookup, message):
    with pytest.raises(TaskError) as caught:
        lookup()
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("lookup, message", [
    (lambda: __import__("estratos.probe.estimators.classifiers", fromlist=["x"])
     .get_estimator("lbgfs"), "--classifier: unknown classifier 'lbgfs' (closest: lbfgs)"),
    (lambda: __import__("estratos.options", fromlist=["x"]).parse_baselines("tfdf"),
     "--baseline: unknown baseline 'tfdf' (closest: tfidf); choose from tfidf, "),
    (lambda: __import__("estratos.probe.config", fromlist=["x"]).ProbeConfig.build(
        control="label-shufle"),
     "--control: unknown control 'label-shufle' (closest: label-shuffle); choose from "
     "control-task, label-shuffle"),
    (lambda: __import__("estratos.probe.estimators.registry", fromlist=["x"])
     .check_features("standardised"),
     "--features: unknown features 'standardised' (closest: standardized); choose from raw, "
     "standardized"),
    (lambda: __import__("estratos.report.compare", fromlist=["x"]).parse_selector(
        "layr=3", "--a"), "--a: unknown key 'layr' (closest: layer); choose from layer, "),
    (lambda: __import__("estratos.report.intervals", fromlist=["x"]).StatsOptions(
        significance="holmes"),
     "--significance: unknown correction 'holmes' (closest: holm); choose from "),
    (lambda: __import__("estratos.report.build", fromlist=["x"]).parse_formats("mdd"),
     "--format: unknown format 'mdd' (closest: md); choose from "),
    (lambda: __import__("estratos.tasks.describe", fromlist=["x"]).render_task_list([], "jsn"),
     "--format: unknown format 'jsn' (closest: json); choose from table, json"),
    (lambda: __import__("estratos.similarity.config", fromlist=["x"]).parse_choices(
        "--measures", "ckaa", ("cka", "rsa"), "measure"),
     "--measures: unknown measure 'ckaa' (closest: cka); choose from cka, rsa"),
    (lambda: __import__("estratos.tasks.synthetic", fromlist=["x"]).task_labels("Lenght"),
     "unknown synthetic-es task 'Lenght' (closest: Length); choose from "),
])
def test_option_lookups_name_their_option_with_the_same_hint(lookup, message):
    with pytest.raises(OptionError) as caught:
        lookup()
    assert caught.value.cli_text().startswith(message)


def test_listings_are_in_registration_order():
    from estratos.protocols import protocol_names
    from estratos.tasks.formats import DATA_FORMATS, format_names
    from estratos.tasks.formats.base import Format
    from estratos.vocab import COMBINERS, METRICS

    assert protocol_names() == ("split", "kfold", "inner-kfold", "cosine", "relatedness")
    assert COMBINERS.names()[:3] == ("single", "pair", "pair4")
    assert METRICS == ("accuracy", "f1", "pearson", "spearman")

    class Late(Format):
        name = "aaa-late"  # sorts first, registered last

    DATA_FORMATS.register(Late.name, Late())
    try:
        assert format_names()[-1] == "aaa-late"
    finally:
        DATA_FORMATS.unregister(Late.name)
    assert "aaa-late" not in format_names()


def test_a_task_file_names_an_unknown_format_with_the_hint(tmp_path: Path):
    from estratos.tasks.custom import load_task_file

    spec = tmp_path / "t.toml"
    spec.write_text(textwrap.dedent("""
        name = "t"
        group = "SC"
        format = "tsvv"
        combiner = "single"
        protocol = "split"
        [files]
        train = "train.tsv"
    """), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_task_file(spec)
    assert caught.value.path == str(spec)
    assert "unknown data format 'tsvv' (closest: tsv" in str(caught.value)


def test_each_name_table_is_keyed_like_its_vocabulary():
    """The algebra and computation tables beside the vocabulary's names cover the same
    names: one name, one meaning, in one order."""
    from estratos.probe.features import COMBINER_FUNCTIONS, COMBINER_WIDTH
    from estratos.stats.metrics import METRIC_FUNCTIONS
    from estratos.vocab import COMBINERS, METRICS

    assert tuple(COMBINER_FUNCTIONS) == COMBINERS.names() == tuple(COMBINER_WIDTH)
    assert tuple(METRIC_FUNCTIONS) == METRICS


def test_a_declared_registry_takes_its_names_and_order_from_the_declaration():
    """The poolings and the surface baselines are named once, in the vocabulary (what the
    CLI lists before numpy or torch loads); their computations' registries are declared with
    those names, so a name on one side only fails at import, not in a test."""
    reg = Registry("thing", {"b": 2, "a": 1}, names=("a", "b"))
    assert reg.names() == ("a", "b")  # the declaration's order, not the entries'
    with pytest.raises(ValueError, match="thing 'c': declared but not given"):
        Registry("thing", {"a": 1, "b": 2}, names=("a", "b", "c"))
    with pytest.raises(ValueError, match="thing 'z': not declared"):
        Registry("thing", {"a": 1, "b": 2, "z": 3}, names=("a", "b"))
    with pytest.raises(ValueError, match="not declared"):
        reg.register("c", 3)
    with pytest.raises(ValueError, match="declared"):
        reg.unregister("a")
    assert reg.register("a", 1) == 1  # the same entry again is still harmless


def test_poolings_and_baselines_are_named_once_in_the_vocabulary():
    from estratos.encode.models.pooling import POOLERS
    from estratos.probe.baseline import BASELINES
    from estratos.vocab import CACHE_POOLINGS, ENCODER_POOLING, POOLINGS, SURFACE_BASELINES

    for registry, names in ((POOLERS, POOLINGS), (BASELINES, SURFACE_BASELINES)):
        assert registry.names() == names
        with pytest.raises(ValueError, match="not declared"):
            registry.register("made-up", registry[names[0]])
    assert CACHE_POOLINGS == POOLINGS + (ENCODER_POOLING,)


def test_control_kinds_are_a_registry_and_their_tuple_its_names():
    from estratos.probe.controls import control_record
    from estratos.vocab import CONTROL_KINDS, CONTROLS

    assert CONTROL_KINDS == CONTROLS.names() == ("control-task", "label-shuffle")
    assert all(CONTROLS[name].summary for name in CONTROLS)
    assert CONTROLS.check("label-shuffle", "--control") == "label-shuffle"
    for check in (lambda: CONTROLS.check("label-shufle", "--control"),
                  lambda: control_record("label-shufle", 1)):
        with pytest.raises(OptionError) as caught:
            check()
        assert caught.value.cli_text() == (
            "--control: unknown control 'label-shufle' (closest: label-shuffle); choose from "
            "control-task, label-shuffle")


def test_an_estimators_determinism_follows_from_the_optim_it_records():
    """``deterministic`` is derived from the recorded ``optim``
    (:data:`estratos.vocab.SEED_FREE_OPTIMIZERS`, what a report reads from a results line),
    never set by hand, so probe and report cannot disagree."""
    from estratos.probe.estimators.registry import RecordedEstimator
    from estratos.results.record import seed_free_fit

    class SeedFree(RecordedEstimator):
        _facts = {"optim": "lbfgs"}

    class Drawn(RecordedEstimator):
        _facts = {"optim": "adam"}

    assert SeedFree.deterministic and seed_free_fit({"optim": "lbfgs"})
    assert not Drawn.deterministic and not seed_free_fit({"optim": "adam"})
    with pytest.raises(TypeError, match="follows from the optim"):
        class Claimed(RecordedEstimator):
            deterministic = True


PLUGIN = '''
from estratos.probe.estimators.registry import RecordedEstimator, register_estimator


@register_estimator
class PluginProbe(RecordedEstimator):
    """An estimator defined outside the package."""

    name = "plugin-probe"
    summary = "a test's own estimator"
    _recorded = ("nhid", "l2_grid")

    def __init__(self, nhid=0, l2_grid=(0.1,), n_classes=2, seed=0, device="cpu",
                 features="raw"):
        self.nhid = nhid
        self.l2_grid = l2_grid
        self.n_classes = n_classes
        self.seed = seed
        self.device = device
        self.features = features

    def cost_per_example(self, n_features, n_classes):
        return float(n_features * n_classes)
'''


def test_an_estimator_in_its_own_module_registers_itself(tmp_path: Path, monkeypatch):
    from estratos.probe.estimators import registry
    from estratos.probe.estimators.classifiers import estimator_names, get_estimator
    from estratos.probe.estimators.settings import resolve_classifier

    (tmp_path / "estratos_plugin_probe.py").write_text(PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(OptionError):
        get_estimator("plugin-probe")
    try:
        module = importlib.import_module("estratos_plugin_probe")
        assert get_estimator("plugin-probe") is module.PluginProbe
        assert estimator_names()[-1] == "plugin-probe"
        built = resolve_classifier({"nhid": 5}, classifier="plugin-probe", task="t",
                                   n_classes=3)
        assert isinstance(built, module.PluginProbe)
        assert (built.nhid, built.n_classes) == (5, 3)
        with pytest.raises(OptionError, match="closest: plugin-probe"):
            get_estimator("plugin-prob")
    finally:
        registry._REGISTRY.unregister("plugin-probe")
        sys.modules.pop("estratos_plugin_probe", None)
    assert "plugin-probe" not in estimator_names()
