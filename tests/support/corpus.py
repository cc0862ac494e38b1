"""Documents the tests put in the knowledge base, and the settings that make them compressible."""

from __future__ import annotations

#: A short operations guide: three paragraphs the offline model can cite.
DOC = (
    "Threadkeeper keeps agent context under one token budget.\n\n"
    "The worker holds a lease on every run and renews it with a heartbeat. "
    "An expired lease means the worker stopped responding, and the run is marked failed.\n\n"
    "Manual compression is refused with thread_busy while a run is active."
)

#: Forty sections about leases: enough text that a few `query_kb` results fill the context.
BIG_DOC = "\n\n".join(
    f"Section {i}. The lease of run {i} is renewed by a heartbeat every few seconds; "
    f"when lease {i} expires the run is failed and its request is documented as dispatched. "
    + "Filler sentence about leases and heartbeats. "
    * 12
    for i in range(40)
)

#: Settings under which BIG_DOC's results are previewed small and compression never starts on
#: its own (only a manual or a provider-triggered compression does).
BIG = {
    "summary_threshold": 1_000_000,
    "tool_result_preview_tokens": 300,
    "summary_keep_recent_tokens": 200,
}
