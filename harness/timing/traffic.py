"""Bytes a rank moves in one EP exchange: rows x bytes per row, remote and local apart.

A dispatch sends each destination rank some rows of `hidden` elements (one per (token,
expert) slot, or one per (token, destination rank) for a deduplicating dispatcher); the
combine returns the same rows. What crosses a link is the remote rows; a rank's rows to
itself never leave the GPU and are counted apart. The rate a link must carry is bounded by
the busier direction of the busiest rank: max over ranks of max(bytes sent to others, bytes
received from others).

Bytes per row (docs/timing-verdicts.md#the-physical-limit): bf16 = 2 x hidden; fp8 = hidden
(one byte per element) + one fp32 scale per 128 channels, as DeepEP's tests count it
(deepseek-ai/DeepEP tests/test_intranode.py @ 031a5c4920082605fc7c0bec0f081d4388930e17:
`fp8_factor = (1 + 4 / 128) / 2` of the bf16 bytes, `per_token_cast_to_fp8`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}
FP8_SCALE_CHANNELS = 128              # one fp32 scale per 128 channels (DeepEP's fp8 cast)
FP8_SCALE_BYTES = 4


def row_bytes(hidden: int, dtype: str = "bf16") -> int:
    """Bytes one token row of `hidden` elements occupies on the wire (fp8: scales included)."""
    if dtype not in ELEMENT_BYTES:
        raise ValueError(f"unknown element type {dtype!r}; expected one of {sorted(ELEMENT_BYTES)}")
    size = hidden * ELEMENT_BYTES[dtype]
    if dtype == "fp8":
        size += FP8_SCALE_BYTES * math.ceil(hidden / FP8_SCALE_CHANNELS)
    return size


def remote_local(sent: Sequence[int], received: Sequence[int], me: int) -> tuple[int, int]:
    """(rows through this rank's link in its busier direction, rows it keeps locally) from
    the rows it sent to and received from each rank."""
    out = sum(sent) - sent[me]
    into = sum(received) - received[me]
    return max(out, into), sent[me]
