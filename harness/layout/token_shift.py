"""Target shift and response slicing of one prompt+response token row.

Mirrors how VIME (slime's Megatron backend) lines up log-probs with tokens:

* A sample is one row `tokens = prompt + response` of `total_len` ids; the model's logit at
  position t predicts token t+1 (Megatron's labels are the tokens shifted left by one).
* The response's log-probs therefore come from logit positions
  `[total_len - response_len - 1, total_len - 1)`, gathered at token positions
  `[total_len - response_len, total_len)` (VIME's loss code slices
  `logits[end - response_length - 1 : end - 1]` and gathers `tokens[-response_length:]`).
* The loss mask (one entry per response token) is aligned to logit positions by padding it with
  `prompt_len - 1` zeros on the left and one zero on the right (VIME's `get_batch`).

An off-by-one in any of these is a framework drift; probe 1 of the attribution checks them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "response_logprob_slice",
    "response_token_slice",
    "align_loss_mask",
    "response_loss_mask",
    "selected_token_logprobs",
    "response_gather_positions",
]


def _check_lengths(total_len: int, response_len: int) -> None:
    if response_len < 0 or total_len < 1:
        raise ValueError(f"total_len={total_len}, response_len={response_len}: expected total_len >= 1 and response_len >= 0")
    if total_len - response_len < 1:
        raise ValueError(
            f"total_len={total_len}, response_len={response_len}: the prompt must hold at least "
            "one token, because the first response token is predicted from the last prompt token"
        )


def response_logprob_slice(total_len: int, response_len: int) -> slice:
    """Logit (and trainer log-prob) positions that predict the response tokens."""
    _check_lengths(total_len, response_len)
    return slice(total_len - response_len - 1, total_len - 1)


def response_token_slice(total_len: int, response_len: int) -> slice:
    """Token positions of the response inside the row: the targets of `response_logprob_slice`."""
    _check_lengths(total_len, response_len)
    return slice(total_len - response_len, total_len)


def response_gather_positions(prompt_len: int, response_len: int, slice_shift: int = 0, target_shift: int = 0) -> tuple[list[int], list[int]]:
    """(logit positions, target token positions) the trainer gathers for one row's response.

    Unshifted, these are `response_logprob_slice` and `response_token_slice` of the row. The two
    shifts are the embedded trainer's injected framework faults: `slice_shift=-1` reads the
    response slice one position early (clamped at position 0), `target_shift=1` gathers the next
    token instead of the sampled one.
    """
    total_len = prompt_len + response_len
    logits = response_logprob_slice(total_len, response_len)
    shift = response_token_slice(total_len, response_len).start - logits.start  # logit t predicts token t+1
    columns = [max(logits.start + j + slice_shift, 0) for j in range(response_len)]
    return columns, [c + shift + target_shift for c in columns]


def align_loss_mask(loss_mask: torch.Tensor, total_len: int) -> torch.Tensor:
    """A response-length loss mask placed at logit positions of a `total_len` row (zeros elsewhere)."""
    loss_mask = torch.as_tensor(loss_mask).reshape(-1)
    response_len = loss_mask.numel()
    _check_lengths(total_len, response_len)
    prompt_len = total_len - response_len
    return F.pad(loss_mask, (prompt_len - 1, 1), value=0)


def response_loss_mask(loss_mask, total_len: int) -> torch.Tensor:
    """The loss mask as the trainer applies it to the log-probs it gathered for one row: the mask
    aligned to the row's logit positions (`align_loss_mask`), read back at the response's logit
    positions (`response_logprob_slice`), fp32. The embedded trainer builds every mask this way."""
    mask = torch.as_tensor(loss_mask, dtype=torch.float32).reshape(-1)
    return align_loss_mask(mask, total_len)[response_logprob_slice(total_len, mask.numel())]


def selected_token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, response_len: int, temperature: float = 1.0) -> torch.Tensor:
    """Trainer-side log-probs of the sampled response tokens for one row.

    `logits` is [total_len, vocab] for the whole row; like Megatron, logits are divided by the
    rollout temperature and upcast to fp32 before the log-softmax.
    """
    tokens = torch.as_tensor(tokens).reshape(-1)
    total_len = tokens.numel()
    if logits.shape[0] != total_len:
        raise ValueError(
            f"selected_token_logprobs: logits cover {logits.shape[0]} positions but the token row "
            f"has {total_len}; pass the logits of the whole prompt+response row"
        )
    positions = response_logprob_slice(total_len, response_len)
    targets = tokens[response_token_slice(total_len, response_len)]
    scaled = logits[positions].float() / temperature
    return torch.log_softmax(scaled, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
