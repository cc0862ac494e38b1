"""An executor that counts the work handed to its threads (to check what runs inline)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any


class CountingExecutor(ThreadPoolExecutor):
    """The loop's default executor, counting what is handed to a thread."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.submitted = 0

    def submit(self, *args: Any, **kwargs: Any) -> Any:
        self.submitted += 1
        return super().submit(*args, **kwargs)
