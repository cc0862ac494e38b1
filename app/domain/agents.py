"""The agent vocabulary every layer shares."""

from __future__ import annotations

#: The agent a thread gets when it names none and the agents file does not say otherwise (the
#: built-in agent's id, and the column default of ``conversations.agent_id``).
DEFAULT_AGENT_ID = "default"
