"""The run engine: the worker that claims queued input and runs the agent graph under a lease.

``engine`` (claim loop, start/drain/stop), ``claims`` (what to run next, expired leases, event
pruning), ``execution`` (one run: stream, heartbeat, outage retries, handoff), ``ledger`` (what a
run writes: messages, usage, events), ``outage`` (waiting out a lost database), ``outcome`` (how a
run ends, through the run state machine's transitions), ``repair`` (dangling tool calls),
``errors`` (the codes a failed run reports) and ``notifier`` (LISTEN/NOTIFY wake-ups).
It sits beside ``app/services``: it uses repositories and the agent core; nothing below imports it.
"""
