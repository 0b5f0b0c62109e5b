"""``twin validate``: measure the twin against a real PyTorch executor on the same requests.

The pipeline, one module a step:

- :mod:`~twin.validate.arrivals`: fix every arrival time (an open-loop copy of
  the workload), so both sides serve the same requests at the same times;
- :mod:`~twin.validate.predict`: the twin's engine configured as the
  executor's single prefill server;
- :mod:`~twin.validate.compare` and :mod:`~twin.validate.plot`: join by row,
  errors against targets, ``validation.json``, ``requests.parquet`` and a figure;
- :mod:`~twin.validate.run`: the steps in order, with the executor passed in
  (``twin.reference.executor`` needs torch; this package does not);
- :mod:`~twin.validate.entry`: the command as a library call
  (:func:`validate_model`): inputs checked first, outputs published as a set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.exports import lazy_exports

if TYPE_CHECKING:
    from twin.validate.arrivals import fix_arrivals
    from twin.validate.compare import TARGETS, join, judge, metrics, rel_err, write_outputs
    from twin.validate.entry import validate_model
    from twin.validate.predict import PrefillOnlyPricer
    from twin.validate.run import CacheChoice, default_cache, validate

if not TYPE_CHECKING:
    __getattr__ = lazy_exports(__name__)  # the names above on first use

__all__ = [
    "TARGETS",
    "CacheChoice",
    "PrefillOnlyPricer",
    "default_cache",
    "fix_arrivals",
    "join",
    "judge",
    "metrics",
    "rel_err",
    "validate",
    "validate_model",
    "write_outputs",
]
