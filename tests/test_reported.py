"""A figure the job reported is believed only when it is a whole number of something."""

from __future__ import annotations

import pytest

from gpudoc.reported import count


@pytest.mark.parametrize("value,believed", [(0, 0), (8, 8), (2**40, 2**40), (True, None), (False, None), (-1, None),
                                            (8.0, None), ("8", None), (None, None), ([8], None)])
def test_only_a_whole_number_is_a_count(value, believed):
    assert count(value) == believed and type(count(value)) is type(believed)
