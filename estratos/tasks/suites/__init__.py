"""Suite declarations: importing this package registers every built-in suite and its specs.

The import order is the registry order (what ``estratos tasks list`` shows).
"""

from estratos.tasks.suites import es_senteval  # noqa: F401  (first: the main benchmark)
from estratos.tasks.suites import es_discoeval  # noqa: F401 - registers it
from estratos.tasks.suites import en_discoeval  # noqa: F401 - registers it
from estratos.tasks.suites import en_senteval  # noqa: F401 - registers it
from estratos.tasks.suites import synthetic_es  # noqa: F401 - registers it
