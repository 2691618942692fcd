"""`verifier.freeze`: a container's pause tried again when runc could not freeze it in time
(seen in CI under load: "OCI runtime pause failed: unable to freeze"), never for other
errors. runc's refusal cannot be caused on demand, so the container is a stand-in at that
boundary; the pause itself is checked on a real container."""

from __future__ import annotations

import docker.errors
import pytest

from skyhub.envs.harbor import verifier

FREEZE_FAILED = ("Cannot pause container c: OCI runtime pause failed: unable to freeze: "
                 "unknown")


class Container:
    def __init__(self, *errors: str) -> None:
        self.errors, self.calls = list(errors), 0

    def pause(self) -> None:
        self.calls += 1
        if self.errors:
            raise docker.errors.APIError(self.errors.pop(0))


def test_a_freeze_runc_gave_up_on_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verifier.time, "sleep", lambda s: None)
    c = Container(FREEZE_FAILED, FREEZE_FAILED)
    verifier.freeze(c)
    assert c.calls == 3


def test_other_errors_and_the_last_try_stand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verifier.time, "sleep", lambda s: None)
    other = Container("Container c is not running")
    with pytest.raises(docker.errors.APIError, match="not running"):
        verifier.freeze(other)
    assert other.calls == 1
    stuck = Container(*[FREEZE_FAILED] * verifier.FREEZE_TRIES)
    with pytest.raises(docker.errors.APIError, match="unable to freeze"):
        verifier.freeze(stuck)
    assert stuck.calls == verifier.FREEZE_TRIES


@pytest.mark.docker
def test_a_real_container_is_paused(docker_daemon: None) -> None:
    import skyhub.sandbox

    with skyhub.sandbox.create(backend="docker") as sb:
        verifier.freeze(sb.container)
        sb.container.reload()
        assert sb.container.status == "paused"
        sb.container.unpause()
        assert sb.exec("echo on").stdout == "on\n"
