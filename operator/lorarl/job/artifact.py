"""The reporter as one artifact: a zipapp of the ``lorarl.reporter`` modules, byte-identical
for identical sources (fixed entry order, timestamps and permissions). The operator image (the
tools image) holds it at ``paths.TOOLS_REPORTER_PATH``, written at image build time by
``python3 -m lorarl.job.artifact PATH``; the Ray head's init container copies it into the pod
and the trainer's container runs it as ``python3 /opt/lorarl/reporter.pyz ...``.

Inside, the modules form the package ``lorarl_reporter`` (they import each other relatively),
so nothing of the lorarl package is needed in the training image.
"""

from __future__ import annotations

import functools
import importlib.resources
import io
import pathlib
import sys
import zipfile

PACKAGE = "lorarl_reporter"
ENTRY = f"import sys\n\nfrom {PACKAGE}.cli import main\n\nsys.exit(main())\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold


def module_sources() -> dict[str, str]:
    """File name -> source of every reporter module (``__main__.py`` excluded: the zip has its own)."""
    root = importlib.resources.files("lorarl").joinpath("reporter")
    return {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in sorted(root.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".py") and entry.name != "__main__.py"
    }


def _add(archive: zipfile.ZipFile, name: str, text: str) -> None:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.compress_type = zipfile.ZIP_STORED  # no zlib: the same bytes wherever it is built
    info.external_attr = 0o644 << 16
    archive.writestr(info, text.encode("utf-8"))


@functools.cache
def reporter_zipapp() -> bytes:
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")  # as zipapp does: the archive follows the shebang line
    with zipfile.ZipFile(buf, "w") as archive:
        _add(archive, "__main__.py", ENTRY)
        for name, text in module_sources().items():
            _add(archive, f"{PACKAGE}/{name}", text)
    return buf.getvalue()


EXPORTER_PACKAGE = "lorarl_exporter"
EXPORTER_ENTRY = f"import sys\n\nfrom {EXPORTER_PACKAGE}.adapter.export import main\n\nsys.exit(main(sys.argv[1:]))\n"
# what the exporter imports: the standard library only, and the reporter's reading of saves
EXPORTER_MODULES = {
    "adapter": ("__init__.py", "egress.py", "export.py", "package.py", "pull.py", "safetensors_file.py", "stores.py", "torchfile.py"),
    "reporter": ("__init__.py", "attempts.py", "checkpoints.py", "launcher.py"),
}


@functools.cache
def exporter_zipapp() -> bytes:
    """The export pod's program (``python3 exporter.pyz --plan ...``): lorarl.adapter's pod-side
    modules and the reporter modules they read saves with, as the package lorarl_exporter."""
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buf, "w") as archive:
        _add(archive, "__main__.py", EXPORTER_ENTRY)
        _add(archive, f"{EXPORTER_PACKAGE}/__init__.py", "")
        for sub, names in EXPORTER_MODULES.items():
            root = importlib.resources.files("lorarl").joinpath(sub)
            for name in names:
                _add(archive, f"{EXPORTER_PACKAGE}/{sub}/{name}", root.joinpath(name).read_text(encoding="utf-8"))
    return buf.getvalue()


def main(argv: list[str]) -> int:
    """``python3 -m lorarl.job.artifact PATH``: write the reporter zipapp (the operator image's build)."""
    if len(argv) != 1:
        print("usage: python3 -m lorarl.job.artifact PATH", file=sys.stderr)
        return 2
    target = pathlib.Path(argv[0])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(reporter_zipapp())
    target.chmod(0o644)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
