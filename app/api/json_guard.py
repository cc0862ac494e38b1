"""A nesting-depth limit for JSON request bodies, checked before the decoder sees them.

msgspec decodes recursively: a 2 KB body nested ~970 levels deep exhausts the interpreter's
recursion limit (``RecursionError``, a 500). A byte scan of bracket depth outside string literals
is linear, cheap, and turns such bodies into a 400 ``validation_error`` on every JSON route.
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Any

from litestar import Request
from litestar.exceptions import ValidationException
from litestar.types import Empty

#: Deepest nesting of arrays/objects accepted in a request body (ours need fewer than 10).
MAX_JSON_DEPTH = 64

#: A complete JSON string literal (escapes included); brackets inside it do not nest anything.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256)]


def json_depth(body: bytes) -> int:
    """Maximum bracket depth of ``body`` outside string literals (0 for a scalar)."""
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    return max(0, *accumulate(map(_STEP.__getitem__, brackets)))


def check_json_depth(body: bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise a 400 ``validation_error`` when ``body`` nests deeper than ``limit``."""
    # Fast path: fewer opening brackets than the limit cannot nest deeper than it.
    if body.count(b"[") + body.count(b"{") <= limit:
        return
    if json_depth(body) > limit:
        raise ValidationException(f"JSON body is nested deeper than {limit} levels")


class GuardedRequest(Request[Any, Any, Any]):
    """The app's request class: JSON bodies are depth-checked before they are decoded."""

    async def json(self) -> Any:
        if self._json is Empty and self._connection_state.json is Empty:
            check_json_depth(await self.body())
        return await super().json()
