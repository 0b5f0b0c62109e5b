"""Arrow <-> numpy through buffers equals pyarrow's own conversions (issue 16).

``workloads.arrow_numpy`` skips pyarrow's pandas shim (its import costs a
twentieth of a chat simulation); the values must be the same as
``to_numpy`` and ``pa.array(..., from_pandas=True)`` give, slices and chunks
included.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from twin.workloads.arrow_numpy import arrow_of, numpy_of

RNG = np.random.default_rng(16)
TYPES = [pa.int8(), pa.int32(), pa.int64(), pa.uint16(), pa.float32(), pa.float64(), pa.bool_()]


def _values(t: pa.DataType, n: int) -> np.ndarray:
    if pa.types.is_boolean(t):
        return RNG.random(n) < 0.5
    if pa.types.is_floating(t):
        return RNG.normal(0, 1e3, n).astype(t.to_pandas_dtype())
    return RNG.integers(0, 100, n).astype(t.to_pandas_dtype())


@pytest.mark.parametrize("t", TYPES, ids=str)
def test_numpy_of_equals_to_numpy_on_slices_and_chunks(t: pa.DataType) -> None:
    for n in (0, 1, 7, 64, 301):
        arr = pa.array(_values(t, n), t)
        assert numpy_of(arr).tolist() == arr.to_numpy(zero_copy_only=False).tolist()
        for lo in (0, 1, 3, 9):
            part = arr.slice(lo, max(n - lo - 2, 0))
            assert numpy_of(part).tolist() == part.to_numpy(zero_copy_only=False).tolist()
        chunked = pa.chunked_array([arr, arr.slice(min(n, 3))], t)
        want = chunked.to_numpy().tolist()
        assert numpy_of(chunked).tolist() == want


@pytest.mark.parametrize("t", TYPES, ids=str)
def test_arrow_of_equals_pa_array_from_pandas(t: pa.DataType) -> None:
    for n in (0, 1, 9, 100):
        values = _values(t, n)
        if pa.types.is_floating(t) and n:
            values[RNG.random(n) < 0.3] = np.nan  # NaN becomes null
        got, want = arrow_of(values, t), pa.array(values, t, from_pandas=True)
        assert got.equals(want) and got.null_count == want.null_count


def test_an_unsupported_type_is_refused() -> None:
    with pytest.raises(TypeError, match="unsupported"):
        numpy_of(pa.array(["a"]))
