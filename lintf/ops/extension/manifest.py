"""The build manifest: what a build of the compiled op recorded beside its library.

``lintf_causal_product.json`` holds the torch (and CUDA) version the library was built for and
the library's file name, size and sha256. The loader checks a library against it before
loading: a truncated or replaced shared library would otherwise crash the process (SIGBUS).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MANIFEST = "lintf_causal_product.json"
_FIELDS = {"torch": str, "library": str, "size": int, "sha256": str}  # what a manifest must hold


class ManifestError(ValueError):
    """A build manifest that cannot be read (invalid JSON, missing keys); the message names the file."""


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(directory: Path, library: Path, **fields: object) -> None:
    """Record library (in directory) with its size and sha256 and the given fields (torch, cuda, key).

    Args:
        directory: where the library and its manifest live.
        library: the built shared library.
        **fields: JSON-serialisable facts of the build; ``torch`` is required.
    """
    manifest = {**fields, "library": library.name, "size": library.stat().st_size, "sha256": file_sha256(library)}
    partial = directory / f"{MANIFEST}.{os.getpid()}.tmp"
    partial.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(partial, directory / MANIFEST)  # readers never see half a manifest


def read_manifest(directory: Path) -> dict | None:
    """The manifest in directory, None without one; ManifestError naming the file if it is unreadable."""
    path = directory / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ManifestError(f"cannot read the build manifest {path} ({error})") from None
    fields = manifest if isinstance(manifest, dict) else {}
    bad = [key for key, kind in _FIELDS.items() if not isinstance(fields.get(key), kind)]
    if bad:
        expected = ", ".join(f"{key}: {kind.__name__}" for key, kind in _FIELDS.items())
        raise ManifestError(
            f"the build manifest {path} lacks a valid {', '.join(bad)} (expected a JSON object with {expected})"
        )
    return manifest


def library_problem(directory: Path, manifest: dict) -> str | None:
    """Why the library a manifest describes must not be loaded (missing, other size or sha256), or None."""
    library = directory / manifest["library"]
    if not library.is_file():
        return f"{library} is missing"
    size = library.stat().st_size
    if size != manifest["size"]:
        return f"{library} has {size} bytes but its build recorded {manifest['size']} (truncated or replaced)"
    if file_sha256(library) != manifest["sha256"]:
        return f"{library} does not match the sha256 its build recorded (corrupted or replaced)"
    return None
