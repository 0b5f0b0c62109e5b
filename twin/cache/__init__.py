"""Token-exact prefix caches."""

from twin.cache.radix import Match, Node, RadixTree

__all__ = ["Match", "Node", "RadixTree"]
