"""``--rm-type deepscaler``, VIME's rules: read the text after the last ``</think>`` (else after
``###Response``, else reward 0), take the last ``\\boxed{...}``, reward 1 if it equals the label
after normalisation or is mathematically equivalent (checked by math-verify), else 0.
"""

from __future__ import annotations

from functools import lru_cache


def last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed{") - 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None  # unbalanced: truncated answer


def _normalise(s: str) -> str:
    return s.strip().replace(" ", "").replace("\\!", "").rstrip(".").lower()


@lru_cache(maxsize=4096)
def _equivalent(answer: str, label: str) -> bool:
    from math_verify import parse, verify

    try:
        return bool(verify(parse(f"${label}$"), parse(f"${answer}$")))
    except Exception:  # noqa: BLE001 - an unparsable answer is a wrong answer
        return False


def deepscaler(response: str, label: str) -> float:
    if "</think>" in response:
        tail = response.rsplit("</think>", 1)[1]
    elif "###Response" in response:
        tail = response.rsplit("###Response", 1)[1]
    else:
        return 0.0
    answer = last_boxed(tail)
    if answer is None:
        return 0.0
    if _normalise(answer) == _normalise(label):
        return 1.0
    return 1.0 if _equivalent(answer, label) else 0.0
