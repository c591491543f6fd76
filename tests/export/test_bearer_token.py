"""The OTLP bearer token: a projected ServiceAccount token file, re-read when the kubelet replaces it."""

import os

from agent.export.otlp.bearer_token import TokenFile
from agent.config import otlp_settings


def _project(folder, token: str, generation: int) -> None:
    """Write the token as the kubelet's projected volume does: a new ..data folder, swapped atomically."""
    data = folder / f"..{generation}"
    data.mkdir()
    (data / "token").write_text(token)
    link = folder / "..data.tmp"
    link.symlink_to(data.name)
    os.replace(link, folder / "..data")
    if not (folder / "token").is_symlink():
        (folder / "token").symlink_to("..data/token")


def test_token_is_sent_and_rotation_is_noticed(tmp_path):
    _project(tmp_path, "first\n", 1)
    token = TokenFile(str(tmp_path / "token"))
    assert token.authorization() == "Bearer first"
    _project(tmp_path, "second", 2)
    assert token.authorization() == "Bearer second"


def test_unreadable_token_keeps_the_last_one_and_none_sends_nothing(tmp_path):
    assert TokenFile(str(tmp_path / "missing")).authorization() is None
    (tmp_path / "token").write_text("good")
    token = TokenFile(str(tmp_path / "token"))
    assert token.authorization() == "Bearer good"
    (tmp_path / "token").unlink()
    assert token.authorization() == "Bearer good"


def test_token_file_comes_from_the_environment():
    assert otlp_settings({"NRA_OTLP_TOKEN_FILE": "/t/token"}).token_file == "/t/token"
    assert otlp_settings({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}).token_file is None
