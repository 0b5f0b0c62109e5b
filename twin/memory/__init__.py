"""KV memory of heterogeneous models: layer kinds and their bytes, and the allocators over them."""

from twin.memory.allocators import (
    DEFAULT_PAGE_TOKENS,
    JengaAllocator,
    PagedAllocator,
    data_bytes,
    fit_requests,
    large_page,
    small_page_bytes,
)
from twin.memory.kinds import LayerKind, kinds_of

__all__ = [
    "DEFAULT_PAGE_TOKENS",
    "JengaAllocator",
    "LayerKind",
    "PagedAllocator",
    "data_bytes",
    "fit_requests",
    "kinds_of",
    "large_page",
    "small_page_bytes",
]
