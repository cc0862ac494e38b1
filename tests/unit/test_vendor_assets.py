"""The vendored browser libraries are exactly what the manifest records, each with its license."""

from __future__ import annotations

import hashlib
import json

from app.api.console import VENDOR_DIR


def test_vendored_files_match_the_manifest_and_carry_licenses() -> None:
    manifest = json.loads((VENDOR_DIR / "manifest.json").read_text())
    assert set(manifest) == {"marked", "dompurify", "swagger-ui", "redoc"}
    for directory, entry in manifest.items():
        assert entry["version"] and entry["license"], directory
        assert "LICENSE" in entry["files"], f"{directory} has no LICENSE next to it"
        on_disk = {p.name for p in (VENDOR_DIR / directory).iterdir()}
        assert on_disk == set(entry["files"]), directory
        for name, digest in entry["files"].items():
            data = (VENDOR_DIR / directory / name).read_bytes()
            assert hashlib.sha256(data).hexdigest() == digest, f"{directory}/{name} was modified"
