"""envd's HTTP table: every Connect code has a status, and the kinds HTTP names apart keep
theirs (as upstream envd answers them)."""

from __future__ import annotations

import pytest

from aenv_envd.errors import CONNECT_CODES, EnvdError, NoSpace, UnsupportedEncoding
from aenv_envd.status_table import CONNECT_CODE_TO_HTTP, http_status


def test_every_code_has_a_status() -> None:
    assert set(CONNECT_CODE_TO_HTTP) == CONNECT_CODES


@pytest.mark.parametrize(("error", "status"), [
    (EnvdError("not_found", "x"), 404),
    (EnvdError("resource_exhausted", "x"), 429),
    (EnvdError("failed_precondition", "x"), 400),
    (NoSpace("x"), 507),
    (UnsupportedEncoding("x"), 415),
])
def test_an_error_answers_with_its_kinds_status(error: EnvdError, status: int) -> None:
    assert http_status(error) == status


def test_a_sub_kind_keeps_its_connect_code() -> None:
    assert (NoSpace("x").code, UnsupportedEncoding("x").code) == (
        "resource_exhausted", "invalid_argument")


def test_an_unknown_code_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown connect code"):
        EnvdError("teapot", "x")
