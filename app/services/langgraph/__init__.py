"""The LangGraph Agent Server API's use cases, on the same intake, lock, worker and event log.

``assistants``: the agents shown as assistants; ``shapes``: rows -> LangGraph JSON;
``threads`` / ``runs``: use cases; ``stream``: run events -> LangGraph SSE parts.
"""
