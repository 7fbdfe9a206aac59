"""The platform secrets key: made once by the launcher before any service starts, private,
kept across restarts, and named to every service."""

from __future__ import annotations

import json
import stat

import pytest
from aenv_cli_testkit import PlatformFactory

pytestmark = pytest.mark.etcd


async def test_the_launcher_makes_one_private_key_and_names_it_to_every_service(
    make_platform: PlatformFactory,
) -> None:
    platform = make_platform()
    await platform.start()
    key_file = platform.home / "secrets.key"
    material = key_file.read_bytes()
    assert len(material) == 32 and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    for service in ("nodeagent", "gateway"):
        seen = json.loads((platform.home / f"standin-{service}.json").read_text())
        assert seen["AENV_SECRETS_KEY_FILE"] == str(key_file)
    await platform.stop()

    again = make_platform(platform.home)
    await again.start()
    assert key_file.read_bytes() == material
