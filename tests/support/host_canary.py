"""A host directory an attack must leave exactly as it was: shared by the sandbox backends'
hostile tests (restore, upload and the tree functions racing a symlink swapper)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path


def make_canary(host: Path) -> Callable[[], dict[str, tuple]]:
    """Fill `host` with files and return a function giving its exact state (names, types,
    modes, owners, contents), to compare before and after an attack."""
    host.mkdir()
    (host / "f").write_text("canary")
    (host / "sub").mkdir()
    (host / "sub" / "g").write_text("canary g")
    os.chmod(host / "f", 0o640)
    os.chmod(host / "sub", 0o750)
    os.chmod(host, 0o751)

    def state() -> dict[str, tuple]:
        out = {}
        for d, dirs, files in os.walk(host):
            for p in [d, *(os.path.join(d, n) for n in dirs + files)]:
                st = os.lstat(p)
                data = Path(p).read_bytes() if stat.S_ISREG(st.st_mode) else None
                out[p] = (st.st_mode, st.st_uid, st.st_gid, data)
        return out

    return state
