"""The mutation mechanism itself (the full run is ``scripts/mutants.py``, not pytest).

Every corpus entry must still fit the code; a tiny repository shows that a mutant is
applied in a scratch copy (killed), an edit the tests miss is reported as surviving,
a stale entry is named, and the real files are never touched.
"""

from __future__ import annotations

import textwrap

import mutants as mutants_script
import pytest

from jaxgrad_dev.mutations import corpus as mutation_corpus
from jaxgrad_dev.mutations import runner

SURVIVORS_OF_THE_FIRST_RUN = (  # the 8 edits that once survived every related test
    "clip-around-freeze",
    "trainer-batches-ignore-accumulate",
    "leaky-relu-ge-zero",
    "linear-bias-drawn-with-weight-key",
    "from-torch-drops-leaky-slope",
    "bce-logits-pos-weight-whole-loss",
    "grad-wrt-sorted-order",
    "float32-rtol-loosened",
)


def test_every_corpus_entry_still_fits_the_code():
    entries = mutation_corpus.load_corpus()
    from parity_checks import all_checks

    names = [check.name for check in all_checks()]
    assert mutation_corpus.stale_entries(entries, check_names=names) == {}
    ids = {m.id for m in entries}
    assert set(SURVIVORS_OF_THE_FIRST_RUN) <= ids
    assert len(entries) >= 48


def test_an_entry_naming_a_vanished_report_row_is_stale():
    entry = next(m for m in mutation_corpus.load_corpus() if m.parity)
    names = ["some other check"]
    reason = mutation_corpus.stale_reason(entry, check_names=names)
    assert reason and repr(entry.parity[0]) in reason and "matches no check" in reason
    assert mutation_corpus.stale_reason(entry, check_names=[f"x {entry.parity[0]} y"]) is None


def _tiny_repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "mod.py").write_text("def slope():\n    return 0.01\n")
    (repo / "tests" / "test_mod.py").write_text(
        "from pkg.mod import slope\n\n\ndef test_slope():\n    assert slope() == 0.01\n"
    )
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "tiny.yaml").write_text(
        textwrap.dedent("""\
        - {id: slope-keras, file: pkg/mod.py, original: 'return 0.01', replacement: 'return 0.2', tests: ['tests/test_mod.py::test_slope'], why: torch's default slope}
        - {id: comment-only, file: pkg/mod.py, original: 'def slope():', replacement: 'def slope():  # no-op', tests: ['tests/test_mod.py'], why: changes nothing}
        - {id: refactored-away, file: pkg/mod.py, original: 'return 0.02', replacement: 'return 0.2', tests: ['tests/test_mod.py'], why: the snippet is gone}
        """)
    )
    return repo, corpus


def test_script_applies_in_a_scratch_copy_and_names_survivors_and_stale_entries(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the tiny repo needs none
    repo, corpus = _tiny_repo(tmp_path)
    before = (repo / "pkg" / "mod.py").read_bytes()
    code = mutants_script.main(["--corpus", str(corpus), "--root", str(repo)])
    out = capsys.readouterr().out
    assert code == 1
    rows = {}  # the table rows come first; the details of each failure follow
    for line in out.splitlines():
        words = line.split()
        if words and words[0] in ("slope-keras", "comment-only", "refactored-away"):
            rows.setdefault(words[0], words[1])
    assert rows == {"slope-keras": "killed", "comment-only": "SURVIVED", "refactored-away": "STALE"}
    assert "`original` no longer occurs in pkg/mod.py" in out
    assert "suite killed 1/2 mutants (50.0 %)" in out
    assert (repo / "pkg" / "mod.py").read_bytes() == before  # the real tree is untouched


def test_applied_restores_the_file_even_when_the_block_raises(tmp_path):
    repo, corpus = _tiny_repo(tmp_path)
    mutant = mutation_corpus.load_corpus(corpus)[0]
    path = repo / "pkg" / "mod.py"
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        with runner.applied(mutant, repo):
            assert b"return 0.2" in path.read_bytes()
            raise RuntimeError
    assert path.read_bytes() == before


def test_sample_is_fixed_and_only_rejects_unknown_ids():
    entries = mutation_corpus.load_corpus()
    first = mutation_corpus.select(entries, sample=3)
    assert len(first) == 3 and mutation_corpus.select(entries, sample=3) == first
    with pytest.raises(ValueError, match=r"`--only` ids \['no-such-mutant'\]"):
        mutation_corpus.select(entries, only=["no-such-mutant"])


@pytest.mark.parametrize(
    "entry,fragment",
    [
        ("{id: a, file: f.py, original: x, tests: [t.py], why: w}", "entry a: missing replacement"),
        (
            "{id: a, file: f.py, original: x, replacement: x, tests: [t.py], why: w}",
            "`replacement` equals `original`",
        ),
        (
            "{id: a, file: f.py, original: x, replacement: y, tests: [], why: w}",
            "`tests` must be a non-empty list",
        ),
        (
            "{id: Bad_Id, file: f.py, original: x, replacement: y, tests: [t.py], why: w}",
            "must be kebab-case",
        ),
        (
            "{id: a, file: f.py, original: x, replacement: y, tests: [t.py], why: w, colour: red}",
            "unknown keys colour",
        ),
    ],
)
def test_bad_corpus_entries_are_named(tmp_path, entry, fragment):
    (tmp_path / "c.yaml").write_text(f"- {entry}\n")
    with pytest.raises(mutation_corpus.CorpusError, match="c.yaml entry") as info:
        mutation_corpus.load_corpus(tmp_path)
    assert fragment in str(info.value)


def test_duplicate_ids_are_named(tmp_path):
    entry = "- {id: a, file: f.py, original: x, replacement: y, tests: [t.py], why: w}\n"
    (tmp_path / "one.yaml").write_text(entry)
    (tmp_path / "two.yaml").write_text(entry)
    with pytest.raises(mutation_corpus.CorpusError, match="id 'a' is also used in one.yaml"):
        mutation_corpus.load_corpus(tmp_path)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--sample", "0"], "--sample (=0) must be >= 1"),
        (["--jobs", "0"], "--jobs (=0) must be >= 1"),
        (["--timeout", "0"], "--timeout (=0.0) must be > 0"),
        (["--only", "a", "--sample", "2"], "--only and --sample exclude each other"),
        (["--root", "/no/such/dir"], "--root (='/no/such/dir') is not a directory"),
        (["--corpus", "/no/such/dir"], "--corpus (='/no/such/dir') is not a directory"),
    ],
)
def test_script_rejects_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        mutants_script.main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_script_names_unknown_ids_and_bad_corpora(tmp_path, capsys):
    assert mutants_script.main(["--only", "no-such-mutant", "--list"]) == 2
    assert "`--only` ids ['no-such-mutant'] are not in the corpus" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("- {id: a}\n")
    assert mutants_script.main(["--corpus", str(tmp_path), "--list"]) == 2
    assert "bad.yaml entry a: missing file, original" in capsys.readouterr().err
