"""Sealing with the platform secrets key: a blob opens only with its key and its AAD."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from aenv_common.errors import InvalidArgument
from aenv_common.secrets import (
    SealBroken,
    SecretsKey,
    create_key_file,
    load_key,
    open_sealed,
    seal,
)

AAD = b"owner\0sec_1\0" + b"1"


def test_sealed_value_opens_with_its_key_and_aad() -> None:
    key = SecretsKey.generate()
    sealed = seal(key, b"hunter2", AAD)
    assert b"hunter2" not in sealed
    assert open_sealed(key, sealed, AAD) == b"hunter2"


def test_each_seal_uses_a_fresh_nonce() -> None:
    key = SecretsKey.generate()
    assert seal(key, b"same", AAD) != seal(key, b"same", AAD)


@pytest.mark.parametrize("position", [0, 5, 20, -1])
def test_tampered_blob_is_seal_broken(position: int) -> None:
    key = SecretsKey.generate()
    sealed = bytearray(seal(key, b"hunter2", AAD))
    sealed[position] ^= 0x01
    with pytest.raises(SealBroken) as caught:
        open_sealed(key, bytes(sealed), AAD)
    assert "hunter2" not in str(caught.value)


def test_truncated_blob_is_seal_broken() -> None:
    key = SecretsKey.generate()
    with pytest.raises(SealBroken):
        open_sealed(key, seal(key, b"x", AAD)[:20], AAD)


def test_wrong_aad_is_seal_broken() -> None:
    key = SecretsKey.generate()
    sealed = seal(key, b"hunter2", AAD)
    with pytest.raises(SealBroken):
        open_sealed(key, sealed, b"owner\0sec_1\0" + b"2")


def test_wrong_key_is_seal_broken() -> None:
    sealed = seal(SecretsKey.generate(), b"hunter2", AAD)
    with pytest.raises(SealBroken):
        open_sealed(SecretsKey.generate(), sealed, AAD)


def test_key_repr_hides_the_material() -> None:
    material = bytes(range(32))
    assert repr(SecretsKey(material)) == "SecretsKey(<hidden>)"
    with pytest.raises(InvalidArgument):
        SecretsKey(material[:16])


def test_create_key_file_is_private_and_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "home" / "secrets.key"
    first = create_key_file(path)
    content = path.read_bytes()
    assert len(content) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    second = create_key_file(path)
    assert path.read_bytes() == content
    # Both handles are the same key: what one seals, the other and a fresh load open.
    sealed = seal(first, b"v", AAD)
    assert open_sealed(second, sealed, AAD) == b"v"
    assert open_sealed(load_key(path), sealed, AAD) == b"v"


def test_concurrent_creators_agree_on_one_key(tmp_path: Path) -> None:
    path = tmp_path / "secrets.key"
    keys: list[SecretsKey] = []
    threads = [threading.Thread(target=lambda: keys.append(create_key_file(path)))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sealed = seal(keys[0], b"v", AAD)
    assert all(open_sealed(k, sealed, AAD) == b"v" for k in keys)


def test_load_key_refuses_missing_short_and_open_files(tmp_path: Path) -> None:
    path = tmp_path / "secrets.key"
    with pytest.raises(InvalidArgument, match="does not exist"):
        load_key(path)
    path.write_bytes(os.urandom(16))
    path.chmod(0o600)
    with pytest.raises(InvalidArgument, match="exactly 32 bytes"):
        load_key(path)
    path.write_bytes(os.urandom(32))
    for open_mode in (0o644, 0o660):
        path.chmod(open_mode)
        with pytest.raises(InvalidArgument, match="0600"):
            load_key(path)


def test_load_key_takes_a_kubernetes_secret_volume(tmp_path: Path) -> None:
    # A Secret volume's file is a symlink into `..data/`, group-readable under an fsGroup.
    data = tmp_path / "..data"
    data.mkdir()
    (data / "secrets.key").write_bytes(os.urandom(32))
    (data / "secrets.key").chmod(0o440)
    (tmp_path / "secrets.key").symlink_to(Path("..data") / "secrets.key")
    key = load_key(tmp_path / "secrets.key")
    assert open_sealed(key, seal(key, b"v", AAD), AAD) == b"v"
