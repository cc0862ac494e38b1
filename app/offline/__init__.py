"""The offline model: a deterministic, extractive chat model (``extractive``) and summarizer
(``summarizer``), the default when no LLM endpoint is configured. It reads tool results and
offload markers through the compression core (``app.compression``) and is chosen by agent
assembly (``app.agents.models``); neither the core nor anything below it imports it.
"""
