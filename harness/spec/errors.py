"""One error tree for everything a user can get wrong in the spec.

Every message is one line a person can act on: which file, which key, what was expected, what was
found (after Hypothesis's `name=value (type=...)` style). Tracebacks are for bugs, not for input.
"""

from __future__ import annotations

# A value quoted in an error line is cut here: the line names the value, it need not reprint it.
MAX_SHOWN_CHARS = 120


def shown(value: object) -> str:
    """repr(value), cut to MAX_SHOWN_CHARS so that one error stays one readable line."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN_CHARS else f"{text[:MAX_SHOWN_CHARS]}... ({len(text)} chars)"


class SpecError(Exception):
    """The experiment spec cannot be used as written. `problems` holds one line per problem."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class KnobError(SpecError):
    """A knob file is malformed: names the file, the key path and what was expected."""

    def __init__(self, file: str, key: str, expected: str, got: object = None, *, has_got: bool = True):
        self.file, self.key, self.expected = file, key, expected
        where = f"{file}: {key}" if key else file
        found = f", got {shown(got)} (type={type(got).__name__})" if has_got and got is not None else ""
        super().__init__(f"{where}: expected {expected}{found}")
