"""Workload files carry a CRC per page and the reader verifies it (issue 32).

Before, a flipped bit inside a compressed token page could decode into other token
ids and run: a silently different workload. Now the writer stores page checksums
(``write_page_checksum``) and every workload reader asks pyarrow to verify them.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twin.cli.main import run
from twin.workloads.generators import get_generator


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("crc") / "small.parquet"
    return get_generator("chat")().write(path, 4, 1.0, 0, 2048)


def test_the_writer_stores_page_checksums(small: Path) -> None:
    # A page header with a crc field: verification of an intact file passes.
    table = pq.ParquetFile(small, page_checksum_verification=True).read()
    assert table.num_rows > 0


def _silent_flip(small: Path) -> bytes:
    """``small`` with one bit flipped in its input-token page such that pyarrow,
    not verifying checksums, reads other data without an error."""
    meta = pq.ParquetFile(small).metadata.row_group(0)
    col = next(
        meta.column(i)
        for i in range(meta.num_columns)
        if meta.column(i).path_in_schema.startswith("input_tokens")
    )
    good = pq.read_table(small)
    raw = small.read_bytes()
    start = col.data_page_offset
    for pos in range(start + col.total_compressed_size - 1, start + 30, -1):
        bad = bytearray(raw)
        bad[pos] ^= 0x10
        try:
            table = pq.read_table(pa.BufferReader(bytes(bad)))
        except Exception:  # a flip the decoder notices: try the next
            continue
        if not table.equals(good):
            return bytes(bad)
    raise AssertionError("no silent flip found")


def test_a_flipped_bit_in_a_checksummed_page_is_one_error_line(
    small: Path, tmp_path: Path, capsys
) -> None:
    bad = tmp_path / "flipped.parquet"
    bad.write_bytes(_silent_flip(small))
    for argv in (
        ["workload", "info", str(bad)],
        ["simulate", str(bad), "-m", "tiny-hybrid", "--out", str(tmp_path / "out")],
    ):
        assert run(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {bad}"), err
        assert "CRC checksum verification failed" in err[0]
    assert not (tmp_path / "out").exists()


def test_a_stretched_workloads_fingerprint_names_a_corrupt_file(small: Path, tmp_path) -> None:
    from twin.errors import TwinError
    from twin.workloads.extend import _fingerprint

    bad = tmp_path / "flipped.parquet"
    bad.write_bytes(_silent_flip(small))
    assert _fingerprint(small, 2)  # intact: a digest
    with pytest.raises(TwinError, match=r"flipped\.parquet: unreadable parquet"):
        _fingerprint(bad, 4)
