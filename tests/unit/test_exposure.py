"""An API without a key is served only on loopback unless the profile says otherwise."""

from __future__ import annotations

import pytest

from sparkserve.serving import preflight
from sparkserve.serving.profile import ProfileError, parse


def test_loopback_without_a_key_is_fine() -> None:
    for addr in ("127.0.0.1", "::1", "127.0.0.2"):
        preflight.check_exposure(parse({"SPARKSERVE_PUBLISH_ADDRESS": addr}), None)
    preflight.check_exposure(parse({}), None)  # compose's default bind


@pytest.mark.parametrize("env,var", [
    ({"SPARKSERVE_PUBLISH_ADDRESS": "0.0.0.0"}, "SPARKSERVE_PUBLISH_ADDRESS"),
    ({"SPARKSERVE_PUBLISH_ADDRESS": "192.168.1.20"}, "SPARKSERVE_PUBLISH_ADDRESS"),
    # host networking (the cluster): the listen address is the host's
    ({"SPARKSERVE_LISTEN": "10.0.0.5"}, "SPARKSERVE_LISTEN"),
])
def test_other_machines_without_a_key_are_refused(env: dict[str, str], var: str) -> None:
    with pytest.raises(ProfileError, match=f"{var}=.*without an API key.*SPARKSERVE_API_KEY_FILE"):
        preflight.check_exposure(parse(env), None)
    preflight.check_exposure(parse(env), "a-key")
    preflight.check_exposure(parse({**env, "SPARKSERVE_ALLOW_UNAUTHENTICATED": "1"}), None)


def test_the_address_must_be_an_ip() -> None:
    with pytest.raises(ProfileError, match="must be an IP address"):
        parse({"SPARKSERVE_PUBLISH_ADDRESS": "my-host"})
    with pytest.raises(ProfileError, match="on or off"):
        parse({"SPARKSERVE_ALLOW_UNAUTHENTICATED": "maybe"})
