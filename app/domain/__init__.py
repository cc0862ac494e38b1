"""The domain's own vocabulary, below every layer: any module of ``app`` may import it, and it
imports nothing of ``app`` (the import-linter contracts in pyproject.toml keep it so)."""
