"""The swe family's exceptions, subclasses of `skyhub.errors.SkyhubError`."""

from __future__ import annotations

from skyhub.errors import SkyhubError


class EditorError(SkyhubError):
    """The file editor refused a command (a missing path, an `old_str` that does not occur
    exactly once, a line out of range, ...).

    Raised by `skyhub.envs.swe.editor.Editor`; the env turns it into the agent's observation,
    so it reaches a user only who calls the editor directly. Its message says what to do
    instead (the agent's affair, not the user's)."""


__all__ = ["EditorError"]
