"""The LangGraph Agent Server API's use cases: adapters over /v1's (intake, runs, threads, the
run feed); they return records, which ``app/api/langgraph`` presents.

``assistants``: the agents as assistants; ``statuses``: LangGraph's run and thread statuses;
``threads`` / ``runs``: use cases; ``stream``: a run's start and events, as the API streams them.
"""
