"""Packing variable-length samples into one THD sequence with cu_seqlens, and unpacking.

Mirrors VIME's `get_batch` (backends/megatron_utils/data.py, qkv_format="thd", no CP): the
micro-batch's token rows are concatenated into one [T] stream, `cu_seqlens` holds the running
boundaries starting at 0, and the stream is padded to a multiple of `pad_multiple`
(VIME: tensor-parallel size x 128) with the padding appended as one extra segment so attention
never mixes it with a real sample. Unpacking drops that segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["PackedSequences", "pack_sequences", "unpack_sequences"]


@dataclass(frozen=True)
class PackedSequences:
    """One packed stream. `cu_seqlens` has num_samples + 1 entries, plus one if padding was added."""

    tokens: torch.Tensor
    cu_seqlens: torch.Tensor
    num_samples: int

    @property
    def max_seqlen(self) -> int:
        lengths = self.cu_seqlens[1:] - self.cu_seqlens[:-1]
        return int(lengths.max()) if lengths.numel() else 0

    @property
    def padding(self) -> int:
        return int(self.cu_seqlens[-1] - self.cu_seqlens[self.num_samples])


def pack_sequences(samples: Sequence[torch.Tensor], pad_multiple: int = 1, pad_value: int | float = 0) -> PackedSequences:
    """Concatenate 1-D samples along dim 0; pad the stream to a multiple of `pad_multiple`."""
    if pad_multiple < 1:
        raise ValueError(f"pack_sequences: pad_multiple={pad_multiple}, expected an integer >= 1")
    if len(samples) == 0:
        raise ValueError("pack_sequences: no samples to pack")
    boundaries = [0]
    for index, sample in enumerate(samples):
        if sample.dim() < 1:
            raise ValueError(f"pack_sequences: sample {index} is a scalar; expected a 1-D row or more")
        boundaries.append(boundaries[-1] + sample.shape[0])
    stream = torch.cat(list(samples), dim=0)
    pad = (pad_multiple - stream.shape[0] % pad_multiple) % pad_multiple
    if pad:
        pad_spec = (0, 0) * (stream.dim() - 1) + (0, pad)
        stream = F.pad(stream, pad_spec, value=pad_value)
        boundaries.append(boundaries[-1] + pad)
    return PackedSequences(
        tokens=stream,
        cu_seqlens=torch.tensor(boundaries, dtype=torch.int32),
        num_samples=len(samples),
    )


def unpack_sequences(packed: PackedSequences) -> list[torch.Tensor]:
    """The original samples, in order, without the padding segment."""
    bounds = packed.cu_seqlens.tolist()
    if len(bounds) < packed.num_samples + 1 or bounds[-1] != packed.tokens.shape[0]:
        raise ValueError(
            f"unpack_sequences: cu_seqlens {bounds[:8]}... ends at {bounds[-1]} but the stream has "
            f"{packed.tokens.shape[0]} entries; cu_seqlens and tokens come from different packs"
        )
    return [packed.tokens[bounds[i] : bounds[i + 1]] for i in range(packed.num_samples)]
