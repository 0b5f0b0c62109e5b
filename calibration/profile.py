"""Moved to ``twin.costmodel.profile`` (the cost model owns its profile format; issue #17).

Re-exported here so code written before the move keeps importing it.
"""

from twin.costmodel.profile import *  # noqa: F403
