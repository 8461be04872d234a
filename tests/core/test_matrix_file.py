"""Damaged index files: every case raises `IndexFormatError` naming the file and the problem."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from toolgate import Index, IndexFormatError, ToolgateError

HEADER_LEN = 128
# Byte offsets of header fields, from the format table in rust/matrix_file.rs.
VERSION_AT, DTYPE_AT, DIM_AT, ROWS_AT, HEADER_CRC_AT = 8, 12, 16, 24, 108
SCALES_OFFSET_AT = 48 + 8 * 3


def good_file(tmp_path: Path, dtype: str = "f32") -> tuple[Path, bytes]:
    rng = np.random.default_rng(0)
    path = tmp_path / f"good-{dtype}.tgi"
    masks = [[i % 70] for i in range(65)]
    Index.build(path, rng.standard_normal((65, 7)).astype(np.float32), dtype=dtype, masks=masks)
    return path, path.read_bytes()


def with_header_crc(data: bytearray) -> bytearray:
    """Re-seals a tampered header, to test the checks behind the header checksum."""
    header = bytearray(data[:HEADER_LEN])
    header[HEADER_CRC_AT : HEADER_CRC_AT + 4] = b"\0\0\0\0"
    data[HEADER_CRC_AT : HEADER_CRC_AT + 4] = struct.pack("<I", zlib.crc32(bytes(header)))
    return data


def put_u32(data: bytearray, at: int, value: int) -> bytearray:
    data[at : at + 4] = struct.pack("<I", value)
    return data


def flip_last_byte(data: bytearray) -> bytearray:
    data[-1] ^= 0x40
    return data


def flip_payload_middle(data: bytearray) -> bytearray:
    data[(HEADER_LEN + len(data)) // 2] ^= 0x01
    return data


DAMAGE: dict[str, tuple[Callable[[bytearray], bytearray], str]] = {
    "empty": (lambda b: bytearray(), "truncated: 0 bytes"),
    "header cut": (lambda b: b[:100], "truncated: 100 bytes"),
    "payload cut": (lambda b: b[:-1], "truncated: the header describes"),
    "trailing bytes": (lambda b: b + b"\0" * 64, "64 unexpected bytes"),
    "magic": (lambda b: bytearray(b"NOTTOOLG") + b[8:], "not a toolgate index"),
    "version": (lambda b: put_u32(b, VERSION_AT, 2), "format version 2 is not supported"),
    "header byte": (lambda b: put_u32(b, DIM_AT, 8), "header checksum mismatch"),
    "payload byte": (flip_payload_middle, "payload checksum mismatch"),
    "last byte": (flip_last_byte, "payload checksum mismatch"),
    # 7 -> 17 changes the padded row stride, so the stored strides no longer fit.
    "resealed dim": (lambda b: with_header_crc(put_u32(b, DIM_AT, 17)), "do not match"),
    "resealed dtype": (lambda b: with_header_crc(put_u32(b, DTYPE_AT, 9)), "unknown dtype code 9"),
    "resealed rows": (
        lambda b: with_header_crc(put_u32(b, ROWS_AT, 66)),
        "do not match",
    ),
    "resealed huge rows": (
        lambda b: with_header_crc(put_u32(b, ROWS_AT + 4, 1)),
        r"at most 2\^32-1",
    ),
    "resealed zero dim": (lambda b: with_header_crc(put_u32(b, DIM_AT, 0)), "dimension 0"),
}


@pytest.mark.parametrize("dtype", ["f32", "int8", "bf16"])
@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_file_is_a_format_error(tmp_path: Path, dtype: str, case: str) -> None:
    path, good = good_file(tmp_path, dtype)
    damage, message = DAMAGE[case]
    path.write_bytes(bytes(damage(bytearray(good))))
    with pytest.raises(IndexFormatError, match=message) as raised:
        Index.open(path)
    assert str(path) in str(raised.value)
    assert isinstance(raised.value, ToolgateError)


def with_checksums(data: bytearray) -> bytearray:
    """Re-seals a tampered payload and the header that records its checksum, as any writer
    of the file can."""
    data[104:108] = struct.pack("<I", zlib.crc32(bytes(data[HEADER_LEN:])))
    return with_header_crc(data)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -0.5])
@pytest.mark.parametrize("verify", [True, False])
def test_an_int8_scale_that_is_no_finite_value_is_a_format_error(
    tmp_path: Path, scale: float, verify: bool
) -> None:
    """Such a file opened, and every search then blamed its caller's query."""
    path, good = good_file(tmp_path, "int8")
    data = bytearray(good)
    (scales_at,) = struct.unpack_from("<Q", data, SCALES_OFFSET_AT)
    struct.pack_into("<f", data, scales_at + 4 * 3, scale)
    path.write_bytes(bytes(with_checksums(data)))
    with pytest.raises(IndexFormatError, match=r"scale of row 3 .* is not a finite value >= 0"):
        Index.open(path, verify=verify)


def test_payload_check_is_opt_out_and_available_later(tmp_path: Path) -> None:
    path, good = good_file(tmp_path)
    path.write_bytes(bytes(flip_payload_middle(bytearray(good))))
    index = Index.open(path, verify=False)  # size and header checks still ran
    with pytest.raises(IndexFormatError, match="payload checksum mismatch"):
        index.verify()
    path.write_bytes(bytes(flip_last_byte(bytearray(good))))
    index = Index.open(path, verify=False)
    result = index.search_gated(np.ones(7, np.float32), 3, flags=range(70))
    assert len(result) == 3  # no crash, no panic


def test_wrong_dimension_when_expected(tmp_path: Path) -> None:
    path, _ = good_file(tmp_path)
    assert Index.open(path, expected_dim=7).dim == 7
    with pytest.raises(IndexFormatError, match="dimension is 7, expected 384"):
        Index.open(path, expected_dim=384)


def test_missing_file_and_directory_are_os_errors(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="No such file") as raised:
        Index.open(tmp_path / "absent.tgi")
    assert "absent.tgi" in str(raised.value)
    with pytest.raises(OSError, match="no-such-dir"):
        Index.build(tmp_path / "no-such-dir" / "i.tgi", np.eye(2, dtype=np.float32))


def test_layout_is_aligned(tmp_path: Path) -> None:
    _, data = good_file(tmp_path, "int8")
    assert data[:8] == b"TGINDEX\x1a"
    offsets = struct.unpack("<7Q", data[48:104])
    assert all(offset % 64 == 0 for offset in offsets[:-1])
    assert offsets[-1] == len(data)
    assert zlib.crc32(data[HEADER_LEN:]) == struct.unpack("<I", data[104:108])[0]
