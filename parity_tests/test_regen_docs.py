"""Documented outputs cannot drift: scripts/regen_docs.py on a cheap block, and its rules."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import _doc_commands
import pytest
import regen_docs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# as the README writes it: .venv/bin/python, which works from a fresh shell (run as
# this interpreter)
CHEAP = ".venv/bin/python scripts/hand_gradients.py --only tiny_relu"


def test_readme_block_is_current_and_a_tampered_copy_is_caught(tmp_path):
    """One run of the command checks the README's block and a copy with one value off."""
    lines = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().split("\n")
    block = next(b for b in regen_docs.find_blocks("README.md", lines) if b.command == CHEAP)
    body = "\n".join(block.body)
    assert "dL/dw1 = dL/dz1 · x = 7.05 × 2 = 14.1" in body
    tampered = tmp_path / "tampered.md"
    tampered.write_text(
        "\n".join(
            [
                f"<!-- jaxgrad:run {CHEAP} | rounding -->",
                "```",
                f"$ {CHEAP}",
                body.replace("7.05 × 2 = 14.1", "7.05 × 2 = 14.2"),
                "```",
                "",
            ]
        ),
        encoding="utf-8",
    )
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/regen_docs.py",
            "--check",
            "--only",
            "tiny_relu$",
            "README.md",
            str(tampered),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 of 2 documented outputs up to date; 1 drifted" in proc.stdout
    assert f"{os.path.relpath(tampered, ROOT)}:1: `{CHEAP}` drifted" in proc.stdout
    assert "-     dL/dw1 = dL/dz1 · x = 7.05 × 2 = 14.2" in proc.stdout
    assert "+     dL/dw1 = dL/dz1 · x = 7.05 × 2 = 14.1" in proc.stdout


def test_readme_commands_work_from_a_fresh_shell():
    """The README's commands call the virtualenv's interpreter (a fresh shell has no
    ``python`` with jax: ``ModuleNotFoundError``), documented blocks included, and its
    two set-up commands are as they were."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    bare = re.findall(r"(?<![\w/.])python (?:scripts/\S+|-m \S+)", readme)
    assert not bare, bare
    assert (
        'python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e ".[test]" '
        "&& .venv/bin/python scripts/parity.py"
    ) in readme
    assert "\n.venv/bin/python -m pytest\n" in readme
    commands = [b.command for b in regen_docs.find_blocks("README.md", readme.split("\n"))]
    assert commands and all(c.startswith(".venv/bin/python scripts/") for c in commands)


def _block(body, options=()):
    return regen_docs.Block("x.md", 0, "python scripts/x.py", tuple(options), body)


def test_masks_hide_only_what_no_machine_reproduces():
    mask = regen_docs.mask
    line = "87 passed (87 checks, {} s)"
    assert mask(line.format("25.3"), False) == mask(line.format("31"), False)
    assert mask("    1  jax   1.0544  0.2814   91.36%    1.67       843", False) == mask(
        "    1  jax   1.0544  0.2814   91.36%   12.03     1,176", False
    )
    assert mask("torch cpu (2 threads)", False) == mask("torch cpu (16 threads)", False)
    # values, losses and accuracies are not masked
    assert mask("    1  jax   1.0544", False) != mask("    1  jax   1.0545", False)
    assert mask("91.36%", False) != mask("91.37%", False)
    # rounding-level magnitudes only where the block asks for it, and only below 1e-4
    row = "mlp relu (mse)      float32     1.79e-07    3.62e-05  PASS"
    other = "mlp relu (mse)      float32     5.96e-08    9.80e-05  PASS"
    assert mask(row, False) != mask(other, False) and mask(row, True) == mask(other, True)
    assert mask("clip 2.50e-01", True) != mask("clip 2.60e-01", True)
    assert mask("mlp relu  PASS", True) != mask("mlp relu  FAIL", True)


def test_rounding_blocks_compare_at_the_tier_of_the_arithmetic():
    line = regen_docs.Line
    # the rows of one report on two CPUs: float32 noise in the error columns, one verdict
    row = "freezing: AdamW, layer 0 frozen   float32   4.47e-08   2.14e-05  PASS"
    other = "freezing: AdamW, layer 0 frozen   float32   4.47e-08   1.54e-04  PASS"
    assert line(row, True) == line(other, True) and line(row, False) != line(other, False)
    # ... but not when the verdict or the name changed, and not on a line without one
    assert line(row, True) != line(other.replace("PASS", "FAIL"), True)
    assert line(row, True) != line(other.replace("layer 0", "layer 1"), True)
    assert line("effect 4.7e-04", True) != line("effect 5.7e-04", True)
    # a zero error written in scientific notation is an error size like any other
    assert line("Linear layout  0.0e+00   8.0e-01", True) == line(
        "Linear layout  1.1e-16   8.0e-01", True
    )
    assert line("Linear layout  0.0e+00   8.0e-01", True) != line(
        "Linear layout  0.0e+00   9.0e-01", True
    )
    # a float32 loss printed at 10 digits: one ulp apart matches, a real change does not
    step = "      1    0.9320652485    {}       1.5e-08"
    assert line(step.format("0.9320652485"), True) == line(step.format("0.9320651889"), True)
    assert line(step.format("0.9320652485"), True) != line(step.format("0.9320752485"), True)
    assert line(step.format("0.9320652485"), False) != line(step.format("0.9320651889"), False)
    # numbers a float32 holds exactly (7 digits or fewer) still compare digit by digit
    assert line("loss 1.054417", True) != line("loss 1.054418", True)
    # equal lines hash alike, so difflib pairs them
    assert hash(line(row, True)) == hash(line(other, True))


def test_measured_blocks_check_the_words_not_the_numbers():
    line = regen_docs.Line
    row = "resnet b128       jax epoch       161.43       6.2           6.0-6.3    0.18x      0.6    2.4%      12.28"
    other = "resnet b128       jax epoch        31.02      32.2         30.1-33.0    1.12x      nan    nan%       9.70"
    assert line(row, False, True) == line(other, False, True) and line(row, False) != line(
        other, False
    )
    assert line(row, False, True) != line(row.replace("jax epoch", "jax step"), False, True)
    goal = "  resnet b128       0.18x (goal >= 1.50x): NOT met; jax epoch reaches 2.4% of the matmul peak"
    assert line(goal, False, True) == line(goal.replace("NOT met", "met"), False, True)
    assert line(goal, False, True) != line(goal.replace("matmul peak", "dot peak"), False, True)


def test_check_puts_back_the_files_a_command_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(regen_docs, "ROOT", str(tmp_path))
    (tmp_path / "docs").mkdir()
    kept = tmp_path / "docs" / "curve.png"
    kept.write_bytes(b"documented")

    def writes(command):
        kept.write_bytes(b"rewritten")
        (tmp_path / "explorer.html").write_text("new")
        return 0, ["ok"], ""

    monkeypatch.setattr(regen_docs, "run", writes)
    command = (
        "python scripts/x.py --plot docs/curve.png --out explorer.html --out /tmp/elsewhere.json"
    )
    assert regen_docs.named_files(command) == [
        str(kept.resolve()),
        str((tmp_path / "explorer.html").resolve()),
    ]
    assert regen_docs.run_leaving_files(command) == (0, ["ok"], "")
    assert kept.read_bytes() == b"documented"
    assert not (tmp_path / "explorer.html").exists()


def test_excerpt_refreshes_shown_lines_and_reports_vanished_ones():
    output = ["header", "a = 1.0 (2.1 s)", "b = 2", "c = 3", "footer"]
    block = _block(["header", "...", "a = 1.0 (9.9 s)", "c = 3"], ["excerpt"])
    assert regen_docs.regenerate(block, output) == (block.body, [])  # masked digits kept
    new, missing = regen_docs.regenerate(block, output, refresh_masked=True)
    assert new == ["header", "...", "a = 1.0 (2.1 s)", "c = 3"] and missing == []
    block = _block(["header", "b = 5", "footer"], ["excerpt"])
    new, missing = regen_docs.regenerate(block, output)
    assert missing == ["b = 5"] and "no longer printed: b = 5" in regen_docs.drift(
        block, new, missing
    )
    # lines must appear in the output's order
    assert regen_docs.regenerate(_block(["c = 3", "b = 2"], ["excerpt"]), output)[1] == ["b = 2"]


def test_full_blocks_keep_masked_digits_and_take_real_changes():
    block = _block(["loss 0.5 (1.0 s)", "err 1.0e-16", "gone"], ["rounding"])
    output = ["loss 0.5 (7.5 s)", "err 3.0e-16", "new line"]
    new, _ = regen_docs.regenerate(block, output)
    assert new == ["loss 0.5 (1.0 s)", "err 1.0e-16", "new line"]
    assert "-gone" in regen_docs.drift(block, new, [])
    assert regen_docs.regenerate(block, output, refresh_masked=True)[0] == output


@pytest.mark.parametrize(
    "text,message",
    [
        (
            "<!-- jaxgrad:run python scripts/x.py | fast -->\n```\n$ python scripts/x.py\n```",
            "unknown option 'fast'",
        ),
        (
            "<!-- jaxgrad:run python scripts/x.py -->\n```\npython scripts/x.py\n```",
            "first line is '$ python scripts/x.py'",
        ),
        ("<!-- jaxgrad:run python scripts/x.py -->\n```\n$ python scripts/x.py\n", "never closed"),
        ("<!-- jaxgrad:run ls -->", "unreadable marker"),
        (
            "<!-- jaxgrad:run .venv/bin/python scripts/x.py -->\n```\n$ python scripts/x.py\n```",
            "first line is '$ .venv/bin/python scripts/x.py'",
        ),
        ("<!-- jaxgrad:run /usr/bin/python scripts/x.py -->", "unreadable marker"),
        ("quoted: `<!-- jaxgrad:run ls -->` is prose", None),
    ],
)
def test_malformed_blocks_are_named(text, message):
    if message is None:
        assert regen_docs.find_blocks("x.md", text.split("\n")) == []
        return
    with pytest.raises(regen_docs.Malformed, match=re.escape(message)):
        regen_docs.find_blocks("x.md", text.split("\n"))


def _tracked_text_files():
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [f for f in files if f.endswith((".py", ".md", ".txt", ".toml", ".cfg"))]


def test_no_reference_to_files_the_repository_does_not_hold():
    """Internal notes and the lesson files are not shipped; cite lessons by number/title."""
    this = os.path.relpath(__file__, ROOT)
    pattern = re.compile(r"DESIGN\.md|CONVENTIONS\.md|shared/lessons|\b\d{3}_[0-9a-f]{16}\b")
    found = []
    for name in _tracked_text_files():
        if name == this:
            continue
        for number, line in enumerate(open(os.path.join(ROOT, name), encoding="utf-8"), 1):
            if pattern.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_torch_pin_is_described_as_it_behaves():
    """`torch==2.13.0` selects a version, not the CPU build: both files must say how."""
    for name in ("README.md", "constraints.txt"):
        text = " ".join(open(os.path.join(ROOT, name), encoding="utf-8").read().split())
        assert "https://download.pytorch.org/whl/cpu" in text, name
        assert "CUDA build" in text, name
        # the old claims: the pin alone selects the CPU build
        assert "torch is pinned to 2.13.0, the CPU build" not in text, name
        assert "PyTorch 2.13.0 CPU build" not in text, name


# The commands the pages write, as a user runs them after the README's install (issue 55):
# the virtualenv's interpreter, a script that exists, arguments its own parser accepts.
PLANTED = """# a page

```bash
.venv/bin/python scripts/train.py --epohcs 3 --no-progress
python scripts/parity.py --filter x10
.venv/bin/python scripts/nosuch.py --quick
```

Prose quoting `.venv/bin/python scripts/graph.py --formatt dot` in a sentence.
"""
# the same page written right (the _should_pass twin), with the shell a page uses:
# a `$ ` prompt, continuation lines, variables, nice, a pipe, a redirection, `&&`, a
# comment, an elision, --help, a module run, the interpreter that makes the virtualenv
GOOD = """# a page

```bash
python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e ".[test]"
.venv/bin/python scripts/train.py --epochs 3 --no-progress   # three epochs
$ .venv/bin/python scripts/parity.py --filter x10 \\
    --filter clip 2>&1 | tee parity.log
XLA_FLAGS=--xla_cpu_use_xnnpack=true nice -n 19 .venv/bin/python scripts/zoo.py --list
.venv/bin/python scripts/train.py ... --resume-from ckpt-00000100
.venv/bin/python scripts/graph.py --format dot --out g.dot && dot -Tpng -O g.dot
.venv/bin/python -m pytest -m long
```

```python
python = "scripts/not_a_command.py --no-such-flag"
```

Prose quoting `.venv/bin/python scripts/graph.py --format dot` and
`.venv/bin/python scripts/doctor.py
--help` over a line break.
"""


def test_check_names_the_file_line_and_argument_of_a_wrong_command(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text(PLANTED, encoding="utf-8")
    assert regen_docs.main(["--check", str(page)]) == 1
    out = capsys.readouterr().out
    problems = [line for line in out.splitlines() if line.startswith(str(page))]
    assert len(problems) == 4, out
    assert problems[0].startswith(f"{page}:4: `.venv/bin/python scripts/train.py --epohcs 3")
    assert problems[0].endswith("train.py: error: unrecognized arguments: --epohcs 3")
    assert problems[1].startswith(f"{page}:5: `python scripts/parity.py --filter x10`: ")
    assert "runs 'python'; write .venv/bin/python" in problems[1]
    assert problems[2] == (
        f"{page}:6: `.venv/bin/python scripts/nosuch.py --quick`: scripts/nosuch.py does not exist"
    )
    assert problems[3].startswith(f"{page}:9: `.venv/bin/python scripts/graph.py --formatt dot`")
    assert "unrecognized arguments: --formatt dot" in problems[3]
    assert "4 documented commands checked: 4 problems" in out


def test_check_passes_the_same_commands_written_right(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text(GOOD, encoding="utf-8")
    assert regen_docs.main(["--check", str(page)]) == 0
    out = capsys.readouterr().out
    assert "9 documented commands checked: all run as written" in out, out


def test_a_bad_argument_value_is_the_scripts_own_error(tmp_path):
    """The script's parser decides, choices included (conformance_aten.py --family)."""
    page = tmp_path / "page.md"
    page.write_text("`.venv/bin/python scripts/conformance_aten.py --family NAME`\n")
    count, problems = _doc_commands.check([str(page)])
    assert count == 1 and len(problems) == 1
    assert "error: argument --family: invalid choice: 'NAME'" in problems[0]


def test_every_command_the_readme_and_docs_write_runs_as_written():
    pages = [
        os.path.join(ROOT, "README.md"),
        *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))),
    ]
    count, problems = _doc_commands.check(pages)
    assert count > 100  # the pages' commands were found
    assert not problems, "\n".join(problems)
