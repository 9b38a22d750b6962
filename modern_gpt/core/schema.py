"""A small checker for the JSON that modern-gpt reads back. A damaged or foreign file is then one sentence.

A schema is plain data, declared beside the code that writes the file:

    int, float, str, bool, None   a value of that type (an int is not a bool; a float may be an int or NaN)
    dict, list                    any object, any list
    (a, b)                        any of the alternatives
    {"key": s, "key?": s}         an object with these keys ("?": optional); other keys are tolerated
    [s]                           a list whose every item matches s
"""

from __future__ import annotations

NAMES = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
    dict: "an object",
    list: "a list",
}


def problem(value, schema, where: str = "") -> str | None:
    """The first way value fails schema, as 'where must be ..., got ...'. None when it matches."""
    if isinstance(schema, tuple):
        if any(problem(value, alt, where) is None for alt in schema):
            return None
        return f"{where or 'the file'} must be {' or '.join(_name(a) for a in schema)}, got {short(value)}"
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return f"{where or 'the file'} must be an object, got {short(value)}"
        for key, sub in schema.items():
            name = key.removesuffix("?")
            path = f"{where}.{name}" if where else name
            if name not in value:
                if key.endswith("?"):
                    continue
                return f"{path} is missing"
            found = problem(value[name], sub, path)
            if found:
                return found
        return None
    if isinstance(schema, list):
        if not isinstance(value, list):
            return f"{where or 'the file'} must be a list, got {short(value)}"
        for i, item in enumerate(value):
            found = problem(item, schema[0], f"{where}[{i}]")
            if found:
                return found
        return None
    if _is(value, schema):
        return None
    return f"{where or 'the file'} must be {_name(schema)}, got {short(value)}"


def _is(value, t) -> bool:
    if t is None:
        return value is None
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if t is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, t)


def _name(schema) -> str:
    if schema is None:
        return "null"
    if isinstance(schema, dict):
        return "an object"
    if isinstance(schema, list):
        return "a list"
    if isinstance(schema, tuple):
        return " or ".join(_name(a) for a in schema)
    return NAMES.get(schema, schema.__name__)


def short(value, limit: int = 40) -> str:
    """repr(value), cut to `limit` characters with '...', to quote in a one-sentence message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def count(n, noun: str) -> str:
    """'1 step', '7 steps': a count and its noun in a message. '?' or any value but 1 takes the plural."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
