"""Moved to ``twin.costmodel.formulas`` (the cost model owns its kernel features; issue #17).

Re-exported here so code written before the move keeps importing it.
"""

from twin.costmodel.formulas import *  # noqa: F403
from twin.costmodel.formulas import __all__  # noqa: F401
