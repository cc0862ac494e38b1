"""Domain errors below every layer that raises them.

Each carries a stable machine-readable code; ``app/api/errors.py`` maps them to HTTP. The
compression errors live here (not in ``app/services``) because the compression core in
``app/agents`` raises them and the agent core never imports services: one definition, raised
where the refusal is decided and answered by the API as is.
"""

from __future__ import annotations


class DomainError(Exception):
    code: str = "error"
    status_code: int = 400

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail or self.code)
        self.detail = detail or self.code


class NothingToCompress(DomainError):
    """Manual compression refused: nothing could be offloaded or summarized (history too short
    or empty). ``tokens``: the view's size when the compressor measured it."""

    code = "nothing_to_compress"
    status_code = 422

    def __init__(self, detail: str = "", *, tokens: int | None = None) -> None:
        super().__init__(detail)
        self.tokens = tokens


class WorkdirUnavailable(DomainError):
    """Offloading was needed but the Workdir could not be written (full disk, read-only mount,
    blocked path). Nothing was shrunk or written. ``reason``: the first failure, without paths;
    ``failed``: how many results could not be offloaded."""

    code = "workdir_unavailable"
    status_code = 507

    def __init__(self, detail: str = "", *, reason: str = "", failed: int = 0) -> None:
        super().__init__(detail)
        self.reason = reason
        self.failed = failed
