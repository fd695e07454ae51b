"""gunicorn's "Listening at" addresses with their real schemes (``tether.http.gunicornlog``)."""

from __future__ import annotations

from tether.http import gunicornlog


def test_only_the_first_bind_keeps_https_the_operations_port_is_plain() -> None:
    assert (
        gunicornlog.listening("https://0.0.0.0:8443,https://0.0.0.0:9090")
        == "https://0.0.0.0:8443,http://0.0.0.0:9090"
    )


def test_one_bind_and_plain_http_are_left_as_they_are() -> None:
    assert gunicornlog.listening("https://127.0.0.1:8443") == "https://127.0.0.1:8443"
    assert (
        gunicornlog.listening("http://127.0.0.1:8443,http://127.0.0.1:9090")
        == "http://127.0.0.1:8443,http://127.0.0.1:9090"
    )
