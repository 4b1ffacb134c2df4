"""Dates typed as people write them become the ISO values date inputs store (services/browser_pool/dates.py)."""

from __future__ import annotations

import pytest

from services.browser_pool.dates import DateFormatError, input_value


@pytest.mark.parametrize(("input_type", "typed", "stored"), [
    ("date", "2012-02-04", "2012-02-04"),
    ("date", "02/04/2012", "2012-02-04"),
    ("date", "2/4/2012", "2012-02-04"),
    ("date", "2/4/12", "2012-02-04"),
    ("date", "04.02.2012", "2012-02-04"),
    ("date", "Feb 4, 2012", "2012-02-04"),
    ("date", "February 4 2012", "2012-02-04"),
    ("date", "4 February 2012", "2012-02-04"),
    ("date", "2012/02/04", "2012-02-04"),
    ("month", "2013-03", "2013-03"),
    ("month", "March 2013", "2013-03"),
    ("month", "03/2013", "2013-03"),
    ("time", "15:30", "15:30"),
    ("time", "3:30 PM", "15:30"),
    ("time", "3pm", "15:00"),
    ("time", "07:05:09", "07:05:09"),
    ("datetime-local", "2012-02-04T15:30", "2012-02-04T15:30"),
    ("datetime-local", "02/04/2012 3:30 PM", "2012-02-04T15:30"),
    ("datetime-local", "Feb 4, 2012", "2012-02-04T00:00"),
    ("week", "2012-W05", "2012-W05"),
    ("week", "2012-02-04", "2012-W05"),
])
def test_common_forms_become_the_stored_value(input_type: str, typed: str, stored: str) -> None:
    assert input_value(input_type, typed) == stored


@pytest.mark.parametrize(("input_type", "typed", "named"), [
    ("date", "next tuesday", "YYYY-MM-DD"),
    ("date", "13/45/2012", "MM/DD/YYYY"),
    ("time", "noonish", "HH:MM"),
    ("month", "someday", "YYYY-MM"),
])
def test_unreadable_text_names_the_expected_form(input_type: str, typed: str, named: str) -> None:
    with pytest.raises(DateFormatError, match=named) as caught:
        input_value(input_type, typed)
    assert repr(typed) in str(caught.value)
