"""kopf's "last handled configuration", stored as a digest.

kopf decides create / update / resume by comparing a job's essence (spec, labels, annotations)
with the one it stored after the last handling; ``kopf.AnnotationsDiffBaseStorage`` stores the
whole essence as JSON in an annotation, so a large spec doubled itself into the annotation and
could pass the API server's 256 KiB limit on all annotations (the patch then fails with 422 and
kopf retries forever). Our handlers never read the diff (the reconcile is level-triggered), so
the essence kopf compares is a SHA-256 of the real one: the same change detection in a fixed
78-byte annotation. (``kopf.StatusDiffBaseStorage`` does not fit: the status subresource's schema
would prune it and it would mix kopf's bookkeeping into the user-facing status.)
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Optional

import kopf


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    def build(self, *, body: Any, extra_fields: Optional[Iterable[Any]] = None) -> Any:
        essence = super().build(body=body, extra_fields=extra_fields)
        encoded = json.dumps(essence, sort_keys=True, separators=(",", ":")).encode()
        return {"sha256": hashlib.sha256(encoded).hexdigest()}
