"""The guest zipapp's entry point: `python3 -I -u guest.pyz` runs this file from the
archive's root (`skyhub.sandbox.guest_app` puts it there, and the package under `guest/`), so
it imports the package as `guest`; it is not run from the installed package.

Undumpable (`harden.make_undumpable`) before anything else is imported, then every module of
the package is imported before the first request: the guest never reads its archive again,
so a command that replaces the file (a root image) cannot change the code that answers it.
"""

try:
    import ctypes

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
except Exception:  # done again, best effort, below
    pass

import os

from guest import harden, procs, server, tars, trees  # noqa: F401 (all of it, now)

os.environ.pop("PYTHONPATH", None)
procs.GUEST_MAIN = True
harden.set_child_subreaper()
harden.make_undumpable()
server.serve()
