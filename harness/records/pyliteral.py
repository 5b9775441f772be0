"""Read the Python-repr dicts VIME logs (`{'train/loss': nan, 'perf/x': np.float64(1.5)}`).

`ast.literal_eval` rejects `nan`, `inf` and numpy 2's `np.float64(...)` reprs, and `eval` would
run whatever a log line says. So: `ast.parse` the text, then walk a small whitelist of node types.
Anything outside it is a LiteralSyntaxError that says what was found and where.
"""

from __future__ import annotations

import ast
import math

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


class LiteralSyntaxError(ValueError):
    """The text is not a literal this reader accepts; the message names the construct."""


def parse_literal(text: str):
    """Parse one Python literal (dict, list, number, string, nan/inf) without evaluating code."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise LiteralSyntaxError(f"not a complete Python literal ({err.msg} at column {err.offset})") from None
    return _value(tree.body)


def parse_dict(text: str) -> dict:
    value = parse_literal(text)
    if not isinstance(value, dict):
        raise LiteralSyntaxError(f"expected a dict, found {type(value).__name__}")
    return value


def _value(node: ast.AST):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise LiteralSyntaxError("dict unpacking (**) is not a literal")
        out = {}
        for key_node, value_node in zip(node.keys, node.values):
            key = _value(key_node)
            if not isinstance(key, (str, int, float)) or isinstance(key, bool):
                found = f"a {type(key_node).__name__.lower()}" if not isinstance(key_node, ast.Constant) else repr(key)
                raise LiteralSyntaxError(f"dict key at column {key_node.col_offset} is {found}, expected a metric name (a string)")
            out[key] = _value(value_node)
        return out
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_value(element) for element in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _value(node.operand)
        if isinstance(operand, bool) or not isinstance(operand, (int, float)):
            raise LiteralSyntaxError(f"sign applied to a non-number at column {node.col_offset}")
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Name):
        if node.id in _NAMED_FLOATS:
            return _NAMED_FLOATS[node.id]
        raise LiteralSyntaxError(f"bare name {node.id!r} at column {node.col_offset} is not a literal")
    if isinstance(node, ast.Call):
        return _wrapped_scalar(node)
    raise LiteralSyntaxError(f"{type(node).__name__} at column {getattr(node, 'col_offset', '?')} is not a literal")


def _wrapped_scalar(node: ast.Call):
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in _SCALAR_WRAPPERS or len(node.args) != 1:
        shown = name or type(func).__name__
        raise LiteralSyntaxError(f"call {shown}(...) at column {node.col_offset} is not a literal")
    inner = _value(node.args[0])
    if name == "float" and isinstance(inner, str):
        try:
            return float(inner)  # float('nan'), float('-inf')
        except ValueError:
            raise LiteralSyntaxError(f"float({inner!r}) is not a number") from None
    return inner
