"""Error messages about a URL with a password: the password field is masked, its letters elsewhere stay."""

from __future__ import annotations

import pytest

from webrl.safety.credentials import mask_password

URL = "postgresql+psycopg://webrl:p@127.0.0.1:70000/webrl"


@pytest.mark.parametrize(("message", "shown"), [
    ('invalid port number: "70000"', 'invalid port number: "70000"'),
    ("at postgresql://webrl:p@127.0.0.1/webrl", "at postgresql://webrl:***@127.0.0.1/webrl"),
    ("host=127.0.0.1 password=p dbname=webrl", "host=127.0.0.1 password=*** dbname=webrl"),
    ("host=127.0.0.1 password='p'", "host=127.0.0.1 password='***'"),
    ("password=pp", "password=pp"),  # another value: not this URL's password
])
def test_the_password_field_is_masked_and_nothing_else(message: str, shown: str) -> None:
    assert mask_password(message, URL) == shown


def test_a_percent_encoded_password_is_masked_in_either_spelling() -> None:
    url = "postgresql://webrl:s3cr%25et@h/webrl"
    assert mask_password("webrl:s3cr%25et@h webrl:s3cr%et@h password=s3cr%et", url) == (
        "webrl:***@h webrl:***@h password=***")
    assert mask_password("no password here", "postgresql://webrl@h/webrl") == "no password here"
