"""Example agents, MCP server and Python tool (README "Agents")."""
