"""Settings come from the environment and a configuration that cannot work is refused."""

from __future__ import annotations

import pytest

from app.config import load_settings


def test_environment_and_database_url() -> None:
    s = load_settings(
        {
            "DATABASE_URL": "postgresql://u@h/db",
            "THREADKEEPER_SUMMARY_THRESHOLD": "5000",
            "THREADKEEPER_SUMMARY_KEEP_RECENT_TOKENS": "1000",
            "THREADKEEPER_API_KEYS": "alice:k1, bob:k2",
            "THREADKEEPER_LOG_JSON": "false",
            "THREADKEEPER_APPROVAL_TOOLS": "web_search, query_kb",
        }
    )
    assert s.database.database_url == "postgresql://u@h/db"
    assert s.compression.summary_threshold == 5000 and s.logging.log_json is False
    assert s.auth.api_key_map() == {"k1": "alice", "k2": "bob"}
    assert s.agent.approval_tool_names() == frozenset({"web_search", "query_kb"})
    explicit = load_settings({"DATABASE_URL": "a", "THREADKEEPER_DATABASE_URL": "postgresql://x/y"})
    assert explicit.database.database_url == "postgresql://x/y"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"THREADKEEPER_SUMMARY_THRESHOLD": "0"}, "SUMMARY_THRESHOLD must be > 0"),
        ({"THREADKEEPER_SUMMARY_THRESHOLD": "lots"}, "invalid settings"),
        ({"THREADKEEPER_SUMMARY_KEEP_RECENT_TOKENS": "-1"}, "KEEP_RECENT_TOKENS must be >= 0"),
        ({"THREADKEEPER_HEARTBEAT_SECONDS": "60"}, "HEARTBEAT_SECONDS must be below"),
        ({"THREADKEEPER_API_KEYS": "nokey"}, "principal:key"),
        ({"THREADKEEPER_WEB_SEARCH_KIND": "bing"}, "searxng or tavily"),
        # One key for two principals: which one owns the threads? Refused, naming the variable.
        ({"THREADKEEPER_API_KEYS": "alice:k1,bob:k1"}, "THREADKEEPER_API_KEYS lists one key twice"),
        # A key no client can present as a bearer token (NBSP) is refused too.
        ({"THREADKEEPER_API_KEYS": "alice:k\xa01"}, "THREADKEEPER_API_KEYS.*visible ASCII"),
        ({"THREADKEEPER_HTTP_HEADER_TIMEOUT_SECONDS": "0"}, "HEADER_TIMEOUT_SECONDS must be > 0"),
        ({"THREADKEEPER_RUN_EVENTS_RETENTION_SECONDS": "-1"}, "RETENTION_SECONDS must be >= 0"),
        ({"THREADKEEPER_DELTA_FLUSH_CHARS": "0"}, "DELTA_FLUSH_CHARS must be > 0"),
    ],
)
def test_bad_settings_are_refused_with_the_setting_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_settings(env)
