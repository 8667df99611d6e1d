"""`nmt evaluate`'s test sets: every bad input stops the command with one error naming the file
and line, before any model loads and with nothing written; and the overlap check's
normalization and counts on a fixture with known seen lines."""
from __future__ import annotations

import sys
import unicodedata

import pytest

from cli import errors
from cli.main import build_parser
from inference import overlap
from inference.evaluation_set import EvaluationSetError, read_aligned, read_tsv


def write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def evaluate_error(capsys, tmp_path, *args: str) -> str:
    """`nmt evaluate ARGS` (with a model directory that does not exist, so any success would
    fail later): the one error line; and no hypotheses file."""
    hypotheses = tmp_path / "hyps.txt"
    # The command's handler as `nmt` runs it, without `main`'s process-wide log set-up.
    status = errors.run_handler(build_parser().parse_args([
        "evaluate", *args, "--model", str(tmp_path / "no-model"),
        "--pipeline-root", str(tmp_path / "root"), "--hypotheses", str(hypotheses)]))
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and err[0].startswith("nmt: error: ")
    assert not hypotheses.exists() and not list(tmp_path.glob(".hypotheses-*"))
    return err[0]


def test_aligned_files_and_several_references(tmp_path):
    source = write(tmp_path / "t.eng", b"Hello.\nI am here.\n")
    first = write(tmp_path / "t.fra", "Bonjour.\nJe suis là.\n".encode())
    second = write(tmp_path / "t2.fra", b"Salut.\r\nMe voici.")  # CRLF, no final newline
    test_set = read_aligned(source, [first, second])
    assert test_set.sources == ["Hello.", "I am here."]
    assert test_set.references == [["Bonjour.", "Je suis là."], ["Salut.", "Me voici."]]
    assert test_set.num_refs == 2


def test_tatoeba_tsv_with_four_or_two_columns(tmp_path):
    four = write(tmp_path / "t4.tsv", "eng\tfra\tHi.\tSalut.\neng\tfra_Latn\tGo.\tVa !\n".encode())
    two = write(tmp_path / "t2.tsv", "Hi.\tSalut.\nGo.\tVa !\n".encode())
    for path in (four, two):
        test_set = read_tsv(path)
        assert test_set.sources == ["Hi.", "Go."]
        assert test_set.references == [["Salut.", "Va !"]]


def test_line_counts_that_differ(capsys, tmp_path):
    source = write(tmp_path / "t.eng", b"One.\nTwo.\nThree.\n")
    reference = write(tmp_path / "t.fra", b"Un.\nDeux.\n")
    message = evaluate_error(capsys, tmp_path, "--source", source, "--reference", reference)
    assert f"{reference} has 2 lines and {source} has 3" in message
    assert "first line past the shorter file: 3" in message


@pytest.mark.parametrize("empty", [b"", b"\n\n  \n"], ids=["no bytes", "blank lines"])
def test_an_empty_file(capsys, tmp_path, empty):
    source = write(tmp_path / "t.eng", b"One.\n")
    reference = write(tmp_path / "t.fra", empty)
    assert evaluate_error(capsys, tmp_path, "--source", source, "--reference", reference) == \
        f"nmt: error: {reference}: the file is empty."


def test_invalid_utf8_names_the_line(capsys, tmp_path):
    source = write(tmp_path / "t.eng", b"One.\nTwo \xe9t\xe9.\n")
    reference = write(tmp_path / "t.fra", b"Un.\nDeux.\n")
    message = evaluate_error(capsys, tmp_path, "--source", source, "--reference", reference)
    assert message.startswith(f"nmt: error: {source}, line 2: not valid UTF-8")


def test_an_empty_english_line(capsys, tmp_path):
    source = write(tmp_path / "t.eng", b"One.\n\nThree.\n")
    reference = write(tmp_path / "t.fra", b"Un.\nDeux.\nTrois.\n")
    assert evaluate_error(capsys, tmp_path, "--source", source, "--reference", reference) == \
        f"nmt: error: {source}, line 2: the English sentence is empty."


@pytest.mark.parametrize("rows, line, what", [
    ("eng\tfra\tHi.\tSalut.\neng\tfra\tGo.\n", 2, "3 tab-separated columns, where line 1 has 4"),
    ("Hi.\tSalut.\tExtra\n", 1, "3 tab-separated columns; a test set has 4"),
    ("Hi.\tSalut.\nGo.\n", 2, "1 tab-separated columns, where line 1 has 2"),
    ("fra\teng\tSalut.\tHi.\n", 1, "the source language is 'fra'"),
])
def test_a_tsv_row_with_the_wrong_columns(capsys, tmp_path, rows, line, what):
    path = write(tmp_path / "t.tsv", rows.encode())
    message = evaluate_error(capsys, tmp_path, "--tsv", path)
    assert message.startswith(f"nmt: error: {path}, line {line}: ") and what in message


def test_source_and_tsv_together_is_a_usage_error(capsys, tmp_path):
    path = write(tmp_path / "t.tsv", b"Hi.\tSalut.\n")
    message = evaluate_error(capsys, tmp_path, "--tsv", path, "--source", path)
    assert "--source FILE --reference FILE, or --tsv FILE" in message


def test_a_file_that_cannot_be_read(tmp_path):
    with pytest.raises(EvaluationSetError, match="missing.eng: cannot be read"):
        read_aligned(str(tmp_path / "missing.eng"), [str(tmp_path / "missing.fra")])


def test_normalization_joins_case_punctuation_and_spacing_not_words():
    assert overlap.normalize("He's not in.") == overlap.normalize("  he’s NOT   in !")
    assert overlap.normalize("Où est-il ?") == overlap.normalize("où est il")
    assert overlap.normalize("He is not in.") != overlap.normalize("He's not in.")
    assert overlap.normalize("Tom is tall.") != overlap.normalize("Tom was tall.")


def test_normalization_of_every_unicode_punctuation_and_space_character():
    # Those NFKC keeps (it makes some, such as U+2017, a space and a combining mark).
    punctuation = [chr(c) for c in range(sys.maxunicode + 1)
                   if unicodedata.category(chr(c)).startswith("P")
                   and unicodedata.normalize("NFKC", chr(c)) == chr(c)]
    apostrophes = {"'", "\u2019", "\u2018"}
    for c in punctuation:
        assert overlap.normalize(f"a{c}b") == ("ab" if c in apostrophes else "a b"), hex(ord(c))
    # The modifier letter apostrophe and the backtick are not category P: dropped all the same.
    assert overlap.normalize("don\u02bct won`t") == "dont wont"
    spaces = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
    assert overlap.normalize(f"{spaces}A{spaces}B{spaces}") == "a b"
    assert overlap.normalize("\ufb01ne STRASSE") == overlap.normalize("fine stra\u00dfe")


def test_overlap_counts_on_known_seen_lines():
    training = ["I'm hungry.", "Where is the station?", "Tom is tall.", "Go."]
    sources = ["Tom is tall.",  # exactly
               "where is the station ?",  # after normalization
               "I’m HUNGRY!",  # after normalization (typographic apostrophe)
               "Tom is very tall.",  # unseen
               "Go away."]  # unseen
    found = overlap.find(sources, training)
    assert found.exact == [True, False, False, False, False]
    assert found.normalized == [True, True, True, False, False]
    assert found.seen == found.normalized
    assert found.training_sentences == 4


def test_progress_gives_rate_and_eta_from_the_first_translated_batch(caplog):
    """A stand-in clock: the model loads in 30 s (not counted), then 64 sentences take 2 s."""
    import io
    import logging

    from inference.evaluate import PROGRESS_EVERY_S, Progress

    now = [0.0]
    progress = Progress(640, stream=io.StringIO(), clock=lambda: now[0])
    now[0] = 30.0
    progress(0)  # the model is loaded
    with caplog.at_level(logging.INFO, logger="inference.evaluate"):
        now[0] += PROGRESS_EVERY_S + 2.0
        progress(64)
        now[0] += 1.0
        progress(128)  # within PROGRESS_EVERY_S of the last line: not shown
    assert [r.getMessage() for r in caplog.records] == [
        "Translated 64 of 640 sentences (10%), 5.3 sentences/s, ETA 1m48s"]
    assert progress.seconds == PROGRESS_EVERY_S + 3.0
