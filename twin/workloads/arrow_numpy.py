"""Arrow arrays to numpy and back through their buffers, without pyarrow's pandas shim.

``pa.Array.to_numpy`` and ``pa.array`` import pandas on first use (pyarrow's
``_pandas_api`` checks every input for pandas types), about 0.25 s of CPU: a
twentieth of a whole simulation of the chat benchmark. The engine's reading
and record writing go through these instead (fixed-width numbers and booleans
only; a null is the caller's to handle: its slot holds whatever the buffer has).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_DTYPES = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
    pa.float32(): np.float32,
    pa.float64(): np.float64,
}


def numpy_of(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of a fixed-width numeric or boolean array (chunks joined), as numpy."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    n, offset = len(arr), arr.offset
    data = arr.buffers()[1]
    if pa.types.is_boolean(arr.type):
        if data is None or n == 0:
            return np.zeros(n, bool)
        bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")
        return bits[offset : offset + n].astype(bool)
    dtype = _DTYPES.get(arr.type)
    if dtype is None:
        raise TypeError(f"numpy_of: unsupported arrow type {arr.type}")
    if data is None or n == 0:
        return np.zeros(n, dtype)
    return np.frombuffer(data, dtype, count=n, offset=offset * np.dtype(dtype).itemsize)


def arrow_of(values: np.ndarray, type_: pa.DataType) -> pa.Array:
    """An arrow array of ``values`` (numbers, or booleans for a bool type); NaN becomes null
    (as ``pa.array(values, type_, from_pandas=True)``)."""
    n = len(values)
    validity = None
    if pa.types.is_boolean(type_):
        data = pa.py_buffer(np.packbits(np.asarray(values, bool), bitorder="little"))
    else:
        values = np.ascontiguousarray(values, _DTYPES[type_])
        if values.dtype.kind == "f":
            valid = ~np.isnan(values)
            if not valid.all():
                validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        data = pa.py_buffer(values)
    return pa.Array.from_buffers(type_, n, [validity, data])
