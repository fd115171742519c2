"""Statistics over per-example test predictions: metrics, bootstrap intervals, tests.

Why a package of its own: the probe records a confidence interval when it writes a result,
and reports and ``estratos compare`` test differences between cells, so the same numbers
must come from one place. It depends on numpy, scipy and :mod:`estratos.vocab` only (a
leaf: every part may import it, it imports no other part of estratos).

- :mod:`.metrics`: a cell's metric from its predictions (accuracy, F1, Pearson, Spearman,
  on the paper's scale), also per fold / subset as the protocols combine them, and the
  package's one Pearson and Spearman (:func:`pearson_rows`, :func:`spearman_rows`);
- :mod:`.bootstrap`: percentile bootstrap intervals over test examples, paired bootstrap
  between two cells sharing a test set;
- :mod:`.significance`: McNemar's exact test and the Holm correction;
- :mod:`.seeds`: two runs of one cell compared over seeds (difference of means, Welch
  interval), for parity checks against other implementations.
"""

from estratos.stats.bootstrap import (
    BOOTSTRAP_SEED,
    DEFAULT_LEVEL,
    DEFAULT_RESAMPLES,
    Difference,
    Interval,
    bootstrap_ci,
    bootstrap_cis,
    compare_to,
    paired_bootstrap,
    same_test_set,
)
from estratos.stats.metrics import (
    METRIC_FUNCTIONS,
    Sample,
    metric_value,
    pearson_rows,
    spearman_rows,
)
from estratos.stats.significance import CORRECTIONS, adjust, holm, mcnemar_exact

__all__ = ["DEFAULT_LEVEL", "DEFAULT_RESAMPLES", "BOOTSTRAP_SEED", "Difference", "Interval",
           "bootstrap_ci", "bootstrap_cis", "compare_to", "paired_bootstrap", "same_test_set",
           "METRIC_FUNCTIONS", "Sample", "metric_value", "pearson_rows", "spearman_rows",
           "CORRECTIONS", "adjust", "holm", "mcnemar_exact"]
