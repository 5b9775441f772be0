"""Read the Python-repr dicts VIME logs (`{'train/loss': nan, 'perf/x': np.float64(1.5)}`).

`ast.literal_eval` rejects `nan`, `inf` and numpy 2's `np.float64(...)` reprs, and `eval` would
run whatever a log line says. So the text is read token by token (the standard library's
`tokenize`) by a small reader that knows literals only: dicts, lists, tuples, sets, numbers,
strings, nan/inf, and a whitelist of scalar wrappers. Anything else is a LiteralSyntaxError that
says what was found and where.

Why not `ast.parse`: every run's log is read on the launcher's threads, while the main thread may
parse source of its own (a test, pytest's assertion rewriting). CPython 3.11's AST constructor
keeps its recursion depth per interpreter, not per thread, and two threads parsing at once fail
with "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905; it failed
tests of `make test` while the batch's threads read run logs). `tokenize` is plain Python over regular
expressions and shares no state between threads.
"""

from __future__ import annotations

import codecs
import io
import math
import tokenize
from tokenize import ERRORTOKEN, NAME, NUMBER, OP, STRING, TokenInfo

# Bare names a repr of a float can produce (`repr(float('nan'))` is 'nan').
_NAMED_FLOATS = {"nan": math.nan, "NaN": math.nan, "inf": math.inf, "Infinity": math.inf, "infinity": math.inf}

# Wrappers whose repr holds one scalar or list as its first argument: numpy 2 scalars
# (`np.float64(0.1)`), torch tensors that slipped through without `.item()` (`tensor(0.1,
# device='cuda:0')`), and `float('nan')`. Keyword arguments (device, dtype) are ignored.
_SCALAR_WRAPPERS = {
    "float",
    "int",
    "tensor",
    "array",
    "float16",
    "float32",
    "float64",
    "longdouble",
    "bfloat16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool_",
    "str_",
}


_CONSTANTS = {"True": True, "False": False, "None": None}
_CLOSERS = {"(": ")", "[": "]", "{": "}"}
_LAYOUT = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


class LiteralSyntaxError(ValueError):
    """The text is not a literal this reader accepts; the message names the construct."""


def parse_literal(text: str):
    """Parse one Python literal (dict, list, number, string, nan/inf) without evaluating code."""
    reader = _Reader(_tokens(text.strip()))
    value = reader.value()
    extra = reader.peek()
    if extra is not None:
        raise LiteralSyntaxError(f"{extra.string!r} at column {extra.start[1]} after the literal is not a literal")
    return value


def parse_dict(text: str) -> dict:
    value = parse_literal(text)
    if not isinstance(value, dict):
        raise LiteralSyntaxError(f"expected a dict, found {type(value).__name__}")
    return value


def _incomplete(what: str) -> LiteralSyntaxError:
    return LiteralSyntaxError(f"not a complete Python literal ({what})")


def _never_closed(opened: list[TokenInfo]) -> LiteralSyntaxError:
    bracket = opened[-1]  # the innermost, as Python's own parser reports it
    return _incomplete(f"{bracket.string!r} was never closed at column {bracket.start[1] + 1}")


def _tokens(text: str) -> list[TokenInfo]:
    """The text's tokens, layout dropped; unbalanced brackets and unterminated strings raise."""
    tokens: list[TokenInfo] = []
    opened: list[TokenInfo] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in _LAYOUT:
                continue
            if token.type == ERRORTOKEN:
                if token.string in ("'", '"'):
                    if opened:
                        raise _never_closed(opened)
                    raise _incomplete(f"unterminated string literal at column {token.start[1] + 1}")
                if token.string.isspace():
                    continue
                raise _incomplete(f"invalid character {token.string!r} at column {token.start[1] + 1}")
            if token.type == OP and token.string in _CLOSERS:
                opened.append(token)
            elif token.type == OP and token.string in _CLOSERS.values():
                if not opened or _CLOSERS[opened[-1].string] != token.string:
                    raise _incomplete(f"unmatched {token.string!r} at column {token.start[1] + 1}")
                opened.pop()
            tokens.append(token)
    except tokenize.TokenError as err:
        if opened:
            raise _never_closed(opened) from None
        raise _incomplete(str(err.args[0]) if err.args else "unexpected end") from None
    if opened:
        raise _never_closed(opened)
    if not tokens:
        raise _incomplete("nothing to read")
    return tokens


class _Reader:
    """A recursive-descent reader over the tokens of one literal."""

    def __init__(self, tokens: list[TokenInfo]):
        self.tokens, self.at = tokens, 0

    def peek(self) -> TokenInfo | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> TokenInfo:
        token = self.peek()
        if token is None:
            raise _incomplete("it ends where a value should follow")
        self.at += 1
        return token

    def is_op(self, string: str) -> bool:
        token = self.peek()
        return token is not None and token.type == OP and token.string == string

    def expect(self, *strings: str) -> TokenInfo:
        token = self.take()
        if token.type != OP or token.string not in strings:
            shown = " or ".join(repr(s) for s in strings)
            raise LiteralSyntaxError(f"{token.string!r} at column {token.start[1]} is not a literal (expected {shown})")
        return token

    def value(self):
        token = self.take()
        column = token.start[1]
        if token.type == NUMBER:
            return _number(token.string)
        if token.type == STRING:
            parts = [token]
            while (following := self.peek()) is not None and following.type == STRING:
                parts.append(self.take())
            return _joined(parts)
        if token.type == NAME:
            return self._name(token)
        if token.type == OP and token.string in ("-", "+"):
            operand = self.value()
            if isinstance(operand, bool) or not isinstance(operand, (int, float)):
                raise LiteralSyntaxError(f"sign applied to a non-number at column {column}")
            return -operand if token.string == "-" else operand
        if token.type == OP and token.string == "{":
            return self._braces()
        if token.type == OP and token.string == "[":
            return self._items("]")
        if token.type == OP and token.string == "(":
            return self._parens()
        raise LiteralSyntaxError(f"{token.string!r} at column {column} is not a literal")

    def _name(self, token: TokenInfo):
        dotted = [token.string]
        while self.is_op("."):
            self.take()
            part = self.take()
            if part.type != NAME:
                raise LiteralSyntaxError(f"{part.string!r} at column {part.start[1]} is not a literal")
            dotted.append(part.string)
        if self.is_op("("):
            return self._call(dotted, token.start[1])
        if len(dotted) > 1:
            raise LiteralSyntaxError(f"attribute {'.'.join(dotted)} at column {token.start[1]} is not a literal")
        if token.string in _CONSTANTS:
            return _CONSTANTS[token.string]
        if token.string in _NAMED_FLOATS:
            return _NAMED_FLOATS[token.string]
        raise LiteralSyntaxError(f"bare name {token.string!r} at column {token.start[1]} is not a literal")

    def _call(self, dotted: list[str], column: int):
        """A whitelisted scalar wrapper around one value (`np.float64(0.5)`); keywords are read and
        ignored (`tensor(0.5, device='cuda:0')`). Any other call is refused before its arguments are read."""
        name = dotted[-1]
        if name not in _SCALAR_WRAPPERS:
            raise LiteralSyntaxError(f"call {'.'.join(dotted)}(...) at column {column} is not a literal")
        self.expect("(")
        positional = []
        while not self.is_op(")"):
            following = self.tokens[self.at + 1] if self.at + 1 < len(self.tokens) else None
            if self.peek().type == NAME and following is not None and following.type == OP and following.string == "=":
                self.take(), self.take()
                self.value()  # a keyword (device=, dtype=): read, not kept
            else:
                positional.append(self.value())
            if self.expect(",", ")").string == ")":
                break
        else:
            self.take()
        if len(positional) != 1:
            raise LiteralSyntaxError(f"call {'.'.join(dotted)}(...) at column {column} is not a literal")
        inner = positional[0]
        if name == "float" and isinstance(inner, str):
            try:
                return float(inner)  # float('nan'), float('-inf')
            except ValueError:
                raise LiteralSyntaxError(f"float({inner!r}) is not a number") from None
        return inner

    def _items(self, closer: str) -> list:
        items = []
        while not self.is_op(closer):
            items.append(self.value())
            self._refuse_comprehension()
            if self.expect(",", closer).string == closer:
                return items
        self.take()
        return items

    def _parens(self):
        if self.is_op(")"):
            self.take()
            return []
        first = self.value()
        self._refuse_comprehension()
        if self.expect(",", ")").string == ")":
            return first  # (x) is x
        return [first] + self._items(")")

    def _braces(self):
        if self.is_op("}"):
            self.take()
            return {}
        if self.is_op("**"):
            raise LiteralSyntaxError("dict unpacking (**) is not a literal")
        key_token = self.peek()
        first = self.value()
        if not self.is_op(":"):
            self._refuse_comprehension()
            if self.expect(",", "}").string == "}":
                return [first]  # a set, read as a list
            return [first] + self._items("}")
        out = {}
        while True:
            self.expect(":")
            out[_metric_name(first, key_token)] = self.value()
            self._refuse_comprehension()
            if self.expect(",", "}").string == "}":
                return out
            if self.is_op("}"):  # a trailing comma
                self.take()
                return out
            if self.is_op("**"):
                raise LiteralSyntaxError("dict unpacking (**) is not a literal")
            key_token = self.peek()
            first = self.value()

    def _refuse_comprehension(self) -> None:
        token = self.peek()
        if token is not None and token.type == NAME and token.string in ("for", "if", "async"):
            raise LiteralSyntaxError(f"comprehension at column {token.start[1]} is not a literal")


def _metric_name(key, token: TokenInfo):
    if not isinstance(key, (str, int, float)) or isinstance(key, bool):
        brackets = {"(": "a tuple", "[": "a list", "{": "a dict"}
        found = brackets.get(token.string, f"a {type(key).__name__}") if isinstance(key, (list, dict)) else repr(key)
        raise LiteralSyntaxError(f"dict key at column {token.start[1]} is {found}, expected a metric name (a string)")
    return key


def _number(text: str):
    for read in (lambda t: int(t, 0), float, complex):
        try:
            return read(text)
        except ValueError:
            continue
    raise LiteralSyntaxError(f"number {text!r} is not a literal")


def _string(token: TokenInfo):
    text = token.string
    prefix = text[: len(text) - len(text.lstrip("rRbBuUfF"))].lower()
    if "f" in prefix:
        raise LiteralSyntaxError(f"f-string at column {token.start[1]} is not a literal")
    quoted = text[len(prefix) :]
    quote = 3 if quoted[:3] in ('"""', "'''") else 1
    body = quoted[quote:-quote]
    if "b" in prefix:
        raw = body.encode("latin-1", "backslashreplace")
        return raw if "r" in prefix else codecs.escape_decode(raw)[0]
    if "r" in prefix:
        return body
    # Escapes as Python reads them; a character beyond latin-1 becomes its own \u escape first.
    return body.encode("latin-1", "backslashreplace").decode("unicode_escape")


def _joined(parts: list[TokenInfo]):
    values = [_string(part) for part in parts]
    if all(isinstance(value, str) for value in values):
        return "".join(values)
    if all(isinstance(value, bytes) for value in values):
        return b"".join(values)
    raise LiteralSyntaxError(f"bytes and text joined at column {parts[0].start[1]} is not a literal")
