"""Text sources: a file, a directory of .txt files in sorted order; binary, empty and missing paths refused."""

from __future__ import annotations

import pytest

from lintf.data.text_sources import read_text_source


def test_a_directory_reads_its_txt_files_in_sorted_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "2.txt").write_text("second\n")
    (tmp_path / "a.txt").write_text("first")  # no final newline: one is added between files
    (tmp_path / "notes.md").write_text("not read")
    assert read_text_source(str(tmp_path), tmp_path) == "first\nsecond\n"
    assert read_text_source(str(tmp_path / "a.txt"), tmp_path) == "first"


@pytest.mark.parametrize("content,problem", [(b"\x89PNG\r\n\x1a\n\x00\x00", r"is a binary file \(it holds a NUL byte "
                                                                            r"at offset 8\), not text"),
                                             (b"caf\xe9 latin-1", r"is not UTF-8 text \(byte 0xe9 at offset 3\)"),
                                             (b"", "is empty")])
def test_a_file_that_is_not_text_is_refused_with_what_is_allowed(tmp_path, content, problem):
    path = tmp_path / "data.bin"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"{problem}; path takes a UTF-8 text file, a directory of .txt files"):
        read_text_source(str(path), tmp_path)
    with pytest.raises(ValueError, match="holds no .txt file"):
        read_text_source(str(tmp_path), tmp_path)
