"""The guest as one file: `guest.pyz`, a zipapp of the `skyhub.sandbox.guest` package.

What a sandbox runs is built here from the installed package, never kept as a second copy:
image builds put it in their context (`images.py`, which hashes it into the tag), Docker
sandboxes of foreign images get it at setup (`docker_channel.guest_setup_tar`), and local
Python runtimes copy it beside the kernel bridge (the Python family's `runtime.py`). The
archive is the package's modules under `guest/` and its `__main__.py` at the root, stored
uncompressed with fixed times, so the same sources always give the same bytes (and tag).
"""

from __future__ import annotations

import functools
import io
import zipfile
from pathlib import Path

#: the package the zipapp is built from
PACKAGE_DIR = Path(__file__).resolve().parent / "guest"
#: the zipapp's file name wherever it is put (`/opt/skyhub/guest.pyz` in a sandbox)
APP_NAME = "guest.pyz"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def sources() -> list[tuple[str, Path]]:
    """(name in the archive, source file) of everything the zipapp holds, in a fixed order."""
    files = sorted(p for p in PACKAGE_DIR.glob("*.py"))
    return [("__main__.py" if p.name == "__main__.py" else f"guest/{p.name}", p)
            for p in files]


@functools.cache
def zipapp() -> bytes:
    """The bytes of `guest.pyz`: `python3 -I -u guest.pyz` starts the guest's server."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, path in sources():
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.external_attr = 0o100644 << 16
            z.writestr(info, path.read_bytes())
    return buf.getvalue()
