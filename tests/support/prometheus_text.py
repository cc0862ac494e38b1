"""A strict reader of the Prometheus text exposition format 0.0.4 and its Content-Type.

prometheus_client's own parser is lenient (it skips what it does not understand), and the
header problem that took targets down in Prometheus 3 (``charset`` given twice) is one that Go's
``mime.ParseMediaType`` refuses: this module refuses the same, and every body line that is not
a HELP/TYPE comment or a well-formed sample of a family declared before it.
"""

from __future__ import annotations

import math
import re

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_PARAM = re.compile(rf"\s*({_TOKEN})=({_TOKEN}|\"(?:[^\"\\]|\\.)*\")\s*")
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(rf"({_NAME})(?:\{{(?:{_LABEL}(?:,{_LABEL})*,?)?\}})? (\S+)(?: (-?[0-9]+))?")
_HELP = re.compile(rf"# HELP ({_NAME}) (?:[^\\\n]|\\[\\n])*")
_TYPE = re.compile(rf"# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)")
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
}


def media_type(header: str) -> tuple[str, dict[str, str]]:
    """``type/subtype`` and its parameters; ValueError on a duplicate or malformed parameter."""
    kind, _, rest = header.partition(";")
    if not re.fullmatch(rf"{_TOKEN}/{_TOKEN}", kind.strip()):
        raise ValueError(f"malformed media type {kind!r}")
    params: dict[str, str] = {}
    for part in rest.split(";") if rest else []:
        match = _PARAM.fullmatch(part)
        if match is None:
            raise ValueError(f"malformed parameter {part!r}")
        name = match.group(1).lower()
        if name in params:
            raise ValueError(f"duplicate parameter name {name!r}")
        params[name] = match.group(2).strip('"')
    return kind.strip().lower(), params


def parse(body: str) -> dict[str, list[tuple[str, float]]]:
    """family name -> [(sample line, value)]; ValueError naming the first bad line."""
    if body and not body.endswith("\n"):
        raise ValueError("the body must end with a line feed")
    types: dict[str, str] = {}
    samples: dict[str, list[tuple[str, float]]] = {}
    for number, line in enumerate(body.splitlines(), 1):
        if line.startswith("# TYPE"):
            match = _TYPE.fullmatch(line)
            if match is None or match.group(1) in types:
                raise ValueError(f"line {number}: bad or repeated TYPE: {line!r}")
            types[match.group(1)] = match.group(2)
            samples[match.group(1)] = []
        elif line.startswith("# HELP"):
            if _HELP.fullmatch(line) is None:
                raise ValueError(f"line {number}: bad HELP: {line!r}")
        elif line.startswith("#") or not line.strip():
            raise ValueError(f"line {number}: stray comment or blank line: {line!r}")
        else:
            match = _SAMPLE.fullmatch(line)
            if match is None:
                raise ValueError(f"line {number}: malformed sample: {line!r}")
            value = float(match.group(2))  # ValueError on anything but a Go float
            if math.isnan(value) and match.group(2) != "NaN":
                raise ValueError(f"line {number}: bad value {match.group(2)!r}")
            samples[_family(match.group(1), types, number)].append((line, value))
    return samples


def _family(name: str, types: dict[str, str], number: int) -> str:
    if name in types:
        return name
    for family, kind in types.items():
        if any(name == family + suffix for suffix in _SUFFIXES.get(kind, ())):
            return family
    raise ValueError(f"line {number}: sample {name!r} of no declared family")
