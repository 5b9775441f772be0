"""Each captured boundary's operation, at a declared precision or in fp64, on captured inputs.

The boundary table measures an envelope per boundary: how far the operation at a side's declared
precision lands from the same operation in fp64, on that side's own captured inputs. These are the
operations of a Qwen3 decoder (the miniature's and the seed's architecture), written out once so
the precision of every step is explicit:

- ``Precision("bfloat16")``: operands and outputs in bf16; norms, rotary, softmax and log-softmax
  accumulate in fp32 and round once (Megatron with attention_softmax_in_fp32, vLLM's sampler);
- ``Precision("float32")``: everything in fp32;
- ``fp8=True`` (the rollout's e4m3 recipe): the weights of the attention and MLP linears rounded in
  128x128 blocks, their input activations in 1x128 groups; embeddings, norms and the LM head stay
  unquantised. Rounded by the reference quantiser written from the format's definition
  (harness/attribution/fp8_reference.py), not by the engine's emulation the table judges;
- ``FP64``: the reference, on the same (unquantised) weights the trainer held.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from harness.attribution import fp8_reference
from harness.embedded.logprobs import processed_mask

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class Precision:
    dtype_name: str
    fp8: bool = False

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.dtype_name]

    @property
    def acc(self) -> torch.dtype:
        """Where reductions accumulate: fp64 for the reference, fp32 otherwise."""
        return torch.float64 if self.dtype == torch.float64 else torch.float32

    def describe(self) -> str:
        return self.dtype_name + (" + fp8 e4m3 (emulated) linears" if self.fp8 else "")


FP64 = Precision("float64")


@dataclass
class Qwen3Weights:
    """The decoder's weights (HF names) and shape facts, with fp8 copies made on demand."""

    state: dict
    config: dict

    def __post_init__(self) -> None:
        self._fp8: dict = {}

    def get(self, name: str, prec: Precision, quantised: bool = False) -> torch.Tensor:
        w = self.state[name]
        if prec.fp8 and quantised:
            if name not in self._fp8:
                self._fp8[name] = fp8_reference.quantize_weight_blockwise(w.float())
            w = self._fp8[name]
        return w.to(prec.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, prec: Precision) -> torch.Tensor:
    h = x.to(prec.acc)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * weight.to(prec.acc)).to(prec.dtype)


def linear(x: torch.Tensor, w: Qwen3Weights, name: str, prec: Precision, quantised: bool = True) -> torch.Tensor:
    x = x.to(prec.dtype)
    if prec.fp8 and quantised:
        x = fp8_reference.quantize_activation_groups(x)
    return F.linear(x, w.get(name, prec, quantised))


def _rope(x: torch.Tensor, theta: float, prec: Precision) -> torch.Tensor:
    """Neox-style rotary (Qwen3) over [T, heads, dim], positions 0..T-1."""
    dim = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=prec.acc) / dim))
    angles = torch.arange(x.shape[0], dtype=prec.acc)[:, None] * inv[None, :]
    cos, sin = torch.cat([angles.cos()] * 2, -1)[:, None, :], torch.cat([angles.sin()] * 2, -1)[:, None, :]
    h = x.to(prec.acc)
    half = dim // 2
    rotated = torch.cat([-h[..., half:], h[..., :half]], -1)
    return (h * cos + rotated * sin).to(prec.dtype)


def attention(x: torch.Tensor, w: Qwen3Weights, layer: int, prec: Precision) -> torch.Tensor:
    """The attention block on the layer's input stream x [T, H]: input norm, q/k/v, q/k norms,
    rotary, causal GQA attention (softmax accumulated in prec.acc), o_proj."""
    c, p = w.config, f"model.layers.{layer}."
    heads, groups, dim, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    h = rms_norm(x, w.get(p + "input_layernorm.weight", FP64), eps, prec)
    T = h.shape[0]
    q = linear(h, w, p + "self_attn.q_proj.weight", prec).view(T, heads, dim)
    k = linear(h, w, p + "self_attn.k_proj.weight", prec).view(T, groups, dim)
    v = linear(h, w, p + "self_attn.v_proj.weight", prec).view(T, groups, dim)
    q = _rope(rms_norm(q, w.get(p + "self_attn.q_norm.weight", FP64), eps, prec), c["rope_theta"], prec)
    k = _rope(rms_norm(k, w.get(p + "self_attn.k_norm.weight", FP64), eps, prec), c["rope_theta"], prec)
    k, v = k.repeat_interleave(heads // groups, 1), v.repeat_interleave(heads // groups, 1)
    scores = torch.einsum("thd,shd->hts", q, k) * dim**-0.5
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    probs = torch.softmax(scores.to(prec.acc).masked_fill(causal, float("-inf")), -1).to(prec.dtype)
    out = torch.einsum("hts,shd->thd", probs, v).reshape(T, heads * dim)
    return linear(out, w, p + "self_attn.o_proj.weight", prec)


def mlp(h: torch.Tensor, w: Qwen3Weights, layer: int, prec: Precision) -> torch.Tensor:
    """The MLP block on the post-attention stream h [T, H]: norm, gate/up, SiLU x up, down."""
    p = f"model.layers.{layer}."
    n = rms_norm(h, w.get(p + "post_attention_layernorm.weight", FP64), w.config["rms_norm_eps"], prec)
    gate, up = linear(n, w, p + "mlp.gate_proj.weight", prec), linear(n, w, p + "mlp.up_proj.weight", prec)
    act = (F.silu(gate.to(prec.acc)) * up.to(prec.acc)).to(prec.dtype)
    return linear(act, w, p + "mlp.down_proj.weight", prec)


def residual(*parts: torch.Tensor, prec: Precision) -> torch.Tensor:
    """x + a (+ m ...), each sum rounded to the declared dtype as the stream is stored."""
    out = parts[0].to(prec.dtype)
    for part in parts[1:]:
        out = (out.to(prec.acc) + part.to(prec.acc)).to(prec.dtype)
    return out


def lm_head(n: torch.Tensor, w: Qwen3Weights, prec: Precision) -> torch.Tensor:
    name = "model.embed_tokens.weight" if w.config.get("tie_word_embeddings") else "lm_head.weight"
    return linear(n, w, name, prec, quantised=False)  # fp8 leaves the LM head unquantised


def logsumexp(logits: torch.Tensor, temperature: float, prec: Precision) -> torch.Tensor:
    return torch.logsumexp(logits.to(prec.acc) / temperature, -1).double()


def selected_logprob(logits: torch.Tensor, targets: torch.Tensor, temperature: float, prec: Precision) -> torch.Tensor:
    return torch.log_softmax(logits.to(prec.acc) / temperature, -1).gather(1, targets[:, None]).squeeze(1).double()


def processed_logprob(logits: torch.Tensor, targets: torch.Tensor, temperature: float, top_k: int, top_p: float, prec: Precision) -> torch.Tensor:
    """The processed contract (T, then top-k, then top-p, renormalised: vLLM's order and tie rules;
    the plain log-prob where a target falls outside the kept set), reduced in prec.acc."""
    scaled = logits.to(prec.acc) / temperature
    keep = processed_mask(scaled, top_k, top_p)
    t = targets[:, None]
    filtered = torch.log_softmax(scaled.masked_fill(~keep, float("-inf")), -1).gather(1, t).squeeze(1)
    plain = torch.log_softmax(scaled, -1).gather(1, t).squeeze(1)
    return torch.where(keep.gather(1, t).squeeze(1), filtered, plain).double()
