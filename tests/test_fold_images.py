"""The read tasks' compaction loop in C (``_speedups.fold_images``) does what its Python
specification (``spark.compact.fold_images_python``) does: the same count of images taken,
the same last operation per key, and ``last`` untouched by the image it stops at."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from binrelay.apply.changes import ABSENT, DELETE, INSERT, UPDATE
from binrelay.rows.events import OP_CODES
from binrelay.spark import compact

#: Key values the fast path takes, and some it leaves to Python (NULL, ABSENT, a bool, a
#: float, a Decimal), drawn from small pools so that keys repeat and move.
_PLAIN = st.one_of(st.integers(-3, 3), st.sampled_from(["a", "b", "é"]),
                   st.sampled_from([b"x", b"y"]))
_OTHER = st.sampled_from([None, ABSENT, True, 1.5, Decimal("2")])


def _image(width: int, odd: float) -> st.SearchStrategy[tuple[Any, ...]]:
    value = st.one_of(_PLAIN, _OTHER) if odd else _PLAIN
    return st.tuples(*([value] * width))


@st.composite
def events(draw: st.DrawFn) -> tuple[str, tuple[int, ...], list[tuple[Any, Any]]]:
    width = draw(st.integers(1, 4))
    key = tuple(draw(st.lists(st.integers(0, width - 1), min_size=1, max_size=width,
                              unique=True)))
    op = draw(st.sampled_from([INSERT, UPDATE, DELETE]))
    odd = draw(st.sampled_from([0.0, 1.0]))
    images = []
    for _ in range(draw(st.integers(0, 12))):
        before = None if op == INSERT else draw(_image(width, odd))
        after = None if op == DELETE else draw(_image(width, odd))
        images.append((before, after))
    return op, key, images


@settings(max_examples=800, deadline=None, derandomize=True)
@given(case=events(), seeded=st.booleans())
def test_c_folds_as_python_does(case: tuple[str, tuple[int, ...], list], seeded: bool) -> None:
    assert compact.fold_images_c is not None, "binrelay._speedups was not built"
    op, key, images = case
    start: dict[tuple[Any, ...], Any] = {}
    if seeded and images:
        # Keys already met earlier in the partition: overwritten, as Python would.
        start[(0,) * len(key)] = ((0, 0, 0, 0), None)
    results = []
    for fold in (compact.fold_images_python, compact.fold_images_c):
        last = dict(start)
        taken = fold(last, images, OP_CODES[op], key, 1, 2, 300, 5)
        results.append((taken, last))
    assert results[0] == results[1]
    taken, last = results[1]
    # What it took, it took whole; what it left, it left for the caller.
    assert 0 <= taken <= len(images)
    again: dict[tuple[Any, ...], Any] = dict(start)
    assert compact.fold_images_python(again, images[:taken], OP_CODES[op], key, 1, 2, 300,
                                      5) == taken
    assert again == last


def test_the_fast_path_stops_where_python_must_take_over() -> None:
    assert compact.fold_images_c is not None, "binrelay._speedups was not built"
    for fold in (compact.fold_images_python, compact.fold_images_c):
        last: dict[tuple[Any, ...], Any] = {}
        images = [(None, (1, "a")), (None, (2, ABSENT)), (None, (3, "c"))]
        assert fold(last, images, OP_CODES[INSERT], (0,), 1, 2, 300, 0) == 1
        assert last == {(1,): ((1, 2, 300, 0), (1, "a"))}
        # An update that moves its key: the old key deleted at the same position.
        last = {}
        assert fold(last, [((1, "a"), (9, "a"))], OP_CODES[UPDATE], (0,), 1, 2, 7, 4) == 1
        assert last == {(1,): ((1, 2, 7, 4), None), (9,): ((1, 2, 7, 4), (9, "a"))}
        # A NULL key, a Decimal key: left to the caller's conversions.
        assert fold({}, [((None, "a"), None)], OP_CODES[DELETE], (0,), 1, 2, 7, 0) == 0
        assert fold({}, [(None, (Decimal(1), "a"))], OP_CODES[INSERT], (0,), 1, 2, 7, 0) == 0
