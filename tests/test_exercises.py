import pytest

from gpuinfer import exercises


def test_every_exercise_accepts_its_answer_and_rejects_a_wrong_one():
    names = exercises.names()
    assert names, "no exercises registered"
    for name in names:
        ex = exercises.get(name)
        right = ex.answer()
        assert exercises.check(name, right), name
        wrong = right * 1.5 + 1
        result = exercises.check(name, wrong)
        assert not result, name
        assert "Hint" in repr(result)


def test_check_never_reveals_the_answer():
    for name in exercises.names():
        answer = exercises.get(name).answer()
        message = repr(exercises.check(name, answer * 3 + 7))
        for shown in {f"{answer}", f"{answer:.3g}", f"{answer:,.0f}", f"{answer:.0f}"}:
            if len(shown) >= 3:  # short numbers occur in names and units
                assert shown not in message, (name, shown)


def test_check_handles_non_numbers_and_unknown_names():
    name = exercises.names()[0]
    assert not exercises.check(name, "about a hundred")
    assert not exercises.check(name, float("nan"))
    with pytest.raises(KeyError, match="no exercise"):
        exercises.check("no-such-exercise", 1)


def test_every_exercise_says_where_it_is_asked():
    for name in exercises.names():
        assert exercises.get(name).where, name
