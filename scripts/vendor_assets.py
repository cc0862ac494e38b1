#!/usr/bin/env python3
"""Vendor the browser libraries the console and the API docs use (no CDN at run time).

Each package is fetched with ``npm pack`` from the npm registry, the listed files are copied verbatim
(only renamed where noted) into ``app/static/vendor/<dir>/`` next to the package's license files, and
``app/static/vendor/manifest.json`` records version, license and SHA-256 of every copied file.
``tests/unit/test_vendor_assets.py`` checks the tree against that manifest.

    python3 scripts/vendor_assets.py        # needs npm and the npm registry
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "app" / "static" / "vendor"

#: dir -> (npm package, version, {file in the package: name here}). Redoc stays on 2.x: 3.x ships
#: an ES module without the global ``Redoc`` that Litestar's Redoc page calls.
PACKAGES: dict[str, tuple[str, str, dict[str, str]]] = {
    "marked": ("marked", "18.2.1", {"lib/marked.esm.js": "marked.esm.js", "LICENSE": "LICENSE"}),
    "dompurify": (
        "dompurify",
        "3.5.0",
        {
            # .js, not .mjs: some servers' MIME tables lack .mjs and browsers refuse such modules.
            "dist/purify.es.mjs": "purify.es.js",
            "LICENSE": "LICENSE",
            "LICENSE-MPL": "LICENSE-MPL",
        },
    ),
    "swagger-ui": (
        "swagger-ui-dist",
        "5.35.0",
        {
            name: name
            for name in (
                "swagger-ui-bundle.js",
                "swagger-ui-bundle.js.LICENSE.txt",
                "swagger-ui-standalone-preset.js",
                "swagger-ui-standalone-preset.js.LICENSE.txt",
                "swagger-ui.css",
                "LICENSE",
                "NOTICE",
            )
        },
    ),
    "redoc": (
        "redoc",
        "2.5.4",
        {
            "bundles/redoc.standalone.js": "redoc.standalone.js",
            "bundles/redoc.standalone.js.LICENSE.txt": "redoc.standalone.js.LICENSE.txt",
            "LICENSE": "LICENSE",
        },
    ),
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    manifest: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for directory, (package, version, files) in PACKAGES.items():
            out = subprocess.run(
                ["npm", "pack", f"{package}@{version}", "--silent"],
                cwd=tmp,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()[-1]
            unpacked = Path(tmp) / directory
            with tarfile.open(Path(tmp) / out) as tar:
                tar.extractall(unpacked, filter="data")
            meta = json.loads((unpacked / "package" / "package.json").read_text())
            target = VENDOR / directory
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for source, name in files.items():
                shutil.copyfile(unpacked / "package" / source, target / name)
            manifest[directory] = {
                "package": package,
                "version": version,
                "license": meta.get("license"),
                "files": {name: sha256(target / name) for name in sorted(files.values())},
            }
    (VENDOR / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"vendored {', '.join(f'{p}@{v}' for p, v, _ in PACKAGES.values())} into {VENDOR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
