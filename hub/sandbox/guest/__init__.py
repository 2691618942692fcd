"""skyhub's guest: the in-sandbox daemon that runs commands, moves files and snapshots the workdir.

Standard library only, Python 3.8+: it runs in containers whose Python may be old, where
skyhub is not installed. Its modules, one job each:
- `procs`: run a command (capped output, a timeout) and kill process trees;
- `trees`: empty and remove directories a sandbox's processes may be changing;
- `tars`: tar, untar, snapshot and restore through the same safe walks;
- `server`: the wire protocol and the requests it answers;
- `harden`: the guest undumpable and a subreaper, and the state a restore resets beyond the
  workdir (writable places, System V IPC).

Two uses:
- inside a sandbox, `python3 -I -u /opt/skyhub/guest.pyz` serves requests over stdin/stdout
  (one persistent process per sandbox, so a command costs a message instead of a Docker exec,
  ~70 ms). `guest.pyz` is a zipapp of this package built on the host by
  `skyhub.sandbox.guest_app` (copied into images at build time, and into foreign images and
  local runtimes at setup); its entry point is `__main__.py`;
- on the host, the local backend calls `procs.run_command`, `tars.tar_bytes` etc. directly.

Modules import each other relatively only (`from .procs import ...`): the package is
`skyhub.sandbox.guest` on the host and `guest` in the zipapp.
"""
