"""mkdocs hook: bundle mermaid with the site, so diagrams render offline.

mkdocs-material loads mermaid from a CDN unless the page already has it. This hook puts a
pinned mermaid (from the npm registry, checked by its SHA-256, cached in
``.tools/mermaid/``) into the built site as ``javascripts/mermaid.min.js``, which
``extra_javascript`` loads before material looks for it: no diagram needs the network
when the site is read. The build needs the network once per machine (or the cached file).
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

VERSION = "11.12.0"
TARBALL = f"https://registry.npmjs.org/mermaid/-/mermaid-{VERSION}.tgz"
SHA256 = "93492e4d609be83653a41c435f4cbd7e74419f7fa6b4fc90a8c983195f64af82"
MEMBER = "package/dist/mermaid.min.js"
TARGET = "javascripts/mermaid.min.js"
CACHE = Path(__file__).resolve().parents[2] / ".tools" / "mermaid" / f"mermaid-{VERSION}.min.js"


class MermaidBundleError(RuntimeError):
    """The pinned mermaid could not be had."""


def bundled() -> bytes:
    """The pinned mermaid.min.js, downloaded once and cached."""
    if CACHE.is_file():
        return CACHE.read_bytes()
    try:
        with urllib.request.urlopen(TARBALL, timeout=60) as response:
            data = response.read()
    except OSError as error:
        raise MermaidBundleError(
            f"mermaid {VERSION} is not cached in {CACHE} and could not be downloaded from {TARBALL}: {error}"
        ) from error
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise MermaidBundleError(f"{TARBALL} has SHA-256 {digest}, not the pinned {SHA256}")
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        member = archive.extractfile(MEMBER)
        if member is None:
            raise MermaidBundleError(f"{TARBALL} holds no {MEMBER}")
        script = member.read()
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    CACHE.write_bytes(script)
    return script


def on_post_build(config: Any, **kwargs: Any) -> None:
    target = Path(config["site_dir"]) / TARGET
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(bundled())
