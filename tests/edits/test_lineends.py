"""Line endings kept through an edit: CRLF files get CRLF back, mixed ones are left as they are."""

from __future__ import annotations

from gpudoc.edits.lineends import as_lf, is_crlf, read_exact, restore


def test_a_crlf_file_is_edited_as_lf_and_gets_crlf_back(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"a: 1\r\nb: 2\r\n")
    text, crlf = as_lf(read_exact(path))
    assert (text, crlf) == ("a: 1\nb: 2\n", True)
    assert restore(text.replace("1", "3"), crlf) == "a: 3\r\nb: 2\r\n"


def test_mixed_or_lf_endings_are_edited_as_they_are():
    assert as_lf("a: 1\r\nb: 2\n") == ("a: 1\r\nb: 2\n", False)
    assert not is_crlf("a: 1\nb: 2")
    assert restore("a: 1\n", False) == "a: 1\n"
