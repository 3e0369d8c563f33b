"""WER and CER: normalisation and edit distance, checked on cases whose answers are known."""

from __future__ import annotations

import pytest

from gossip_tts.judge.text_errors import ErrorCount, char_errors, edit_distance, normalise_text, total, word_errors


def test_normalise_drops_case_and_punctuation_but_keeps_inner_apostrophes():
    assert normalise_text("Printing, in the ONLY sense -- don't 'quote' it!") == "printing in the only sense don't quote it"
    assert normalise_text("  so-called\tcafé\n") == "so called cafe"
    assert normalise_text("...") == ""


@pytest.mark.parametrize(("ref", "hyp", "distance"), [
    ("kitten", "sitting", 3),  # two substitutions, one insertion
    ("", "ab", 2),
    ("ab", "", 2),
    ("flaw", "lawn", 2),
    ("same", "same", 0),
])
def test_edit_distance_known_answers(ref, hyp, distance):
    assert edit_distance(ref, hyp) == distance
    assert edit_distance(hyp, ref) == distance


def test_word_errors_count_words_not_punctuation():
    assert word_errors("The cat sat.", "the cat sat") == ErrorCount(0, 3)
    assert word_errors("The cat sat.", "the bat sat on") == ErrorCount(2, 3)  # one substitution, one insertion
    assert word_errors("the cat sat", "").rate == 1.0
    assert word_errors("the cat sat", "a b c d e f").rate == 2.0  # insertions can push WER above 1


def test_char_errors_count_letters_and_spaces():
    assert char_errors("The cat.", "the bat") == ErrorCount(1, 7)
    assert char_errors("ab", "ab") == ErrorCount(0, 2)


def test_empty_reference_scores_zero_only_when_nothing_was_heard():
    assert ErrorCount(0, 0).rate == 0.0
    assert word_errors("...", "hello").rate == 1.0


def test_total_weighs_clips_by_length_not_equally():
    short_wrong, long_right = ErrorCount(1, 1), ErrorCount(0, 9)
    assert total([short_wrong, long_right]).rate == pytest.approx(0.1)  # the mean of rates would say 0.5
    assert total([]).rate == 0.0
