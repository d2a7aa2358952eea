"""``builder.errors.first_line``: what every ``error:`` line built from a third-party exception
shows, including the exceptions that have no message (which once raised IndexError)."""

from __future__ import annotations

from builder.errors import first_line


def test_the_first_non_empty_line_cut_at_the_limit():
    assert first_line(ValueError("\n  shape mismatch\nat node 3\n")) == "shape mismatch"
    assert first_line(ValueError("x" * 500)) == "x" * 300
    assert first_line(ValueError("x" * 500), 200) == "x" * 200


def test_an_exception_without_a_message_is_named_by_its_type():
    assert first_line(RuntimeError()) == "RuntimeError"
    assert first_line(OSError("   \n  ")) == "OSError"
