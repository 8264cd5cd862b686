"""lorarl adapter pull: fetch an exported adapter and verify every digest before it is kept.

Reads the manifest, checks its sha256 against the expected digest (status.adapter.digest, when
known), downloads each file it lists into ``DIR.partial`` while hashing it, checks each size and
sha256, and only then renames the directory to ``DIR``: nothing unverified is left under DIR."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil

from . import package, stores

_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class VerifyError(Exception):
    """A digest, size or the manifest does not match."""


def pull(store: stores.Store, target: str, expected_digest: str | None = None) -> dict:
    """Download and verify into ``target`` (which must not exist); returns the manifest."""
    if os.path.exists(target):
        raise VerifyError(f"{target} exists: pull into a new directory")
    with store.open(package.MANIFEST) as f:
        raw = f.read()
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    if expected_digest and digest != expected_digest:
        raise VerifyError(f"{package.MANIFEST}: digest {digest}, expected {expected_digest}")
    try:
        manifest = json.loads(raw)
        files = [(x["name"], int(x["size"]), str(x["sha256"])) for x in manifest["files"]]
    except (ValueError, KeyError, TypeError) as err:
        raise VerifyError(f"{package.MANIFEST}: not a manifest ({type(err).__name__})") from None
    partial = target.rstrip("/") + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    try:
        for name, size, sha in files:
            if not _FILE_NAME.match(name) or name == package.MANIFEST:
                raise VerifyError(f"{package.MANIFEST}: file name {name!r} is not a plain name")
            h, n = hashlib.sha256(), 0
            with store.open(name) as src, open(os.path.join(partial, name), "wb") as out:
                for chunk in iter(functools.partial(src.read, 1 << 20), b""):
                    h.update(chunk)
                    n += len(chunk)
                    out.write(chunk)
            if n != size or h.hexdigest() != sha:
                raise VerifyError(f"{name}: {n} bytes, sha256 {h.hexdigest()}; the manifest says {size} bytes, sha256 {sha}")
        with open(os.path.join(partial, package.MANIFEST), "wb") as out:
            out.write(raw)
        os.replace(partial, target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest
