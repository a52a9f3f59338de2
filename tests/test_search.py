"""gpuinfer.predict.search.largest_meeting: the last yes of a monotone question, found by bisection."""

import math

import pytest

from gpuinfer.predict.search import MAX_OPEN_ENDED, largest_meeting


class Counted:
    """A threshold question n <= limit that records every n it was asked about."""

    def __init__(self, limit):
        self.limit, self.asked = limit, []

    def __call__(self, n):
        self.asked.append(n)
        return n <= self.limit


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 8, 9, 100, 1023, 1024, 1025, 99_999])
def test_bounded_finds_the_threshold_within_log2_questions(limit):
    q = Counted(limit)
    assert largest_meeting(q, 1, 100_000) == limit
    assert all(1 <= n <= 100_000 for n in q.asked)
    # 2 end checks + ceil(log2(100,000)) = 17 halvings at most.
    assert len(q.asked) <= 2 + 17


@pytest.mark.parametrize("limit", [1, 5, 64, 65, 1_000_000])
def test_open_ended_doubles_then_bisects(limit):
    q = Counted(limit)
    assert largest_meeting(q) == limit
    # doubling: 1, 2, 4, ... up to the first power of two past the limit, then halvings
    # over that last bracket: at most 2 (log2(limit) + 1) + 1 questions.
    assert len(q.asked) <= 2 * (math.log2(limit) + 1) + 1


def test_answers_at_the_ends():
    assert largest_meeting(lambda n: n * n <= 50, 1, 100) == 7     # 7**2 = 49, 8**2 = 64
    assert largest_meeting(lambda n: False, 1, 10) == 0           # lo - 1: nothing meets it
    assert largest_meeting(lambda n: False, 5, 10) == 4
    assert largest_meeting(lambda n: True, 1, 10) == 10           # hi itself
    assert largest_meeting(lambda n: True, 3, 2) == 2             # empty range: lo - 1
    assert largest_meeting(lambda n: n <= 0, 0) == 0              # lo = 0 is allowed
    assert largest_meeting(lambda n: True) == MAX_OPEN_ENDED      # stops at the cap


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(ok=3), TypeError, "ok must be a function"),
    (dict(ok=bool, lo=-1), ValueError, "lo must be"),
    (dict(ok=bool, lo=1.5), ValueError, "lo must be"),
    (dict(ok=bool, hi=2**40), ValueError, "hi must be"),
])
def test_bad_input_is_named(kwargs, error, words):
    with pytest.raises(error, match=words):
        largest_meeting(**kwargs)
