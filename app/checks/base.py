"""What every section of ``python -m app check`` shares: the context it reads and the report it
writes (one line per finding)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from app.agents.spec import AgentSpec
    from app.config import Settings

Level = Literal["ok", "warning", "problem", "skipped"]


@dataclass
class CheckContext:
    """What the sections know. Earlier sections fill in what later ones need (``settings``,
    ``specs``); a section that needs something an earlier one could not provide is skipped."""

    environ: Mapping[str, str]
    #: ``--providers``: the providers section may call every distinct model once.
    providers: bool = False
    settings: Settings | None = None
    specs: list[AgentSpec] | None = None
    #: ``--api N`` / ``--workers M``: the topology the connections section budgets (None: one
    #: API process, plus one worker process unless the worker runs inside it).
    api: int | None = None
    workers: int | None = None
    #: Set by the database section: the database answered.
    database_answered: bool = False


@dataclass
class Report:
    """The findings of one section, each one line."""

    section: str
    lines: list[tuple[Level, str]] = field(default_factory=list)

    def ok(self, text: str) -> None:
        self.lines.append(("ok", text))

    def warning(self, text: str) -> None:
        self.lines.append(("warning", text))

    def problem(self, text: str) -> None:
        self.lines.append(("problem", text))

    def skipped(self, text: str) -> None:
        self.lines.append(("skipped", text))

    @property
    def failed(self) -> bool:
        return any(level == "problem" for level, _ in self.lines)


@dataclass(frozen=True)
class Check:
    """One named section. ``needs``: context fields it cannot run without (``settings``,
    ``specs``); ``option``: a ``CheckContext`` flag that must be set (else it is skipped,
    ``skipped_hint`` saying how to run it)."""

    name: str
    run: Callable[[CheckContext, Report], Awaitable[None]]
    needs: tuple[str, ...] = ()
    option: str | None = None
    skipped_hint: str = ""


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
