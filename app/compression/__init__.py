"""The compression core: what keeps a thread's model request under its one budget.

Importable on its own (a graph a user brings opts in through it), it never imports agent
assembly (``app.agents``), the offline model (``app.offline``), services, the worker or the API
(import-linter contracts in pyproject.toml). Its homes:

- ``summary``: ``ContextCompressor`` (the algorithm, automatic and manual paths);
- ``middleware``, ``binding``: the algorithm at a model call (Threadkeeper's summary middleware,
  and for a graph of the user's own the public ``threadkeeper`` middleware and node wrapper,
  whose compressor the worker binds around each run);
- ``offload``, ``previews``, ``retrieval``, ``recall``: tool results written to the Workdir and
  replaced by previews, the structured reading of result lists, the recall index and search;
- ``cuts``, ``budget``, ``summary_messages``, ``outcome``, ``summarizers``: where a summary cuts,
  the budget's arithmetic, the summary message's vocabulary, what a compression did, the
  summarizer contract and the LLM summarizer;
- ``tokens``, ``message_memo``, ``messages``, ``storable``, ``terms``, ``tool_names``, ``overflow``:
  counting, per-message memos, message text and markers, storable text, index terms, the tool
  names the core reads, provider context-overflow detection;
- ``workdir``: the thread's Workdir (local or S3-compatible store, the recall index).
"""
