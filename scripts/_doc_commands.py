"""The commands written in the README and docs/*.md run as written after the README's
install (``scripts/regen_docs.py --check`` checks them; issue 55).

A command is a line of a shell code block (a fence with no language, or ``bash``, ``sh``,
``shell``, ``console``, ``text``; a leading ``$ `` prompt dropped, lines ending in ``\\``
joined), or an inline code span, split into simple commands at ``&&``, ``||``, ``|``,
``;`` and ``&``, with leading ``NAME=value`` assignments and ``nice -n N`` / ``time`` /
``env`` left out. Every one that runs Python must:

- run the virtualenv's interpreter, ``.venv/bin/python`` (``../.venv/bin/python`` from a
  sub-folder): a fresh shell after the README's install has no ``python`` that can import
  jaxgrad (``python3 -m venv`` itself, which makes the virtualenv, is the exception);
- name a script that exists, when it runs ``scripts/NAME.py``;
- give that script arguments its own parser accepts: the script is run as ``__main__``
  up to its ``parser.parse_args`` call, which parses the words and then stops it (no
  script does work before parsing: ``scripts/_cli.py``'s contract), so a misspelt flag
  is ``argparse``'s own error. Words ``...`` / ``…`` (an elision in the prose) and
  redirections (``> log``, ``2>&1``) are not arguments.

``check(path, lines)`` returns one line per problem: ``FILE:LINE: `COMMAND`: WHAT``. This
module imports only the standard library.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import re
import runpy
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHELL_FENCES = ("", "bash", "sh", "shell", "console", "text")
PYTHON = re.compile(r"^(?:\S*/)?python(?:3(?:\.\d+)?)?$")  # any interpreter
VENV_PYTHON = re.compile(r"^(?:\.\./)*\.venv/bin/python$")  # the README's
SEPARATORS = {"&&", "||", "|", ";", "&", "(", ")", ";;"}
# a redirection and its target (`> log`, `2>&1`, `>> out.txt`): not arguments
REDIRECTION = re.compile(r"(?:(?<=\s)|^)\d*(?:&>|>>|>\||>|<)&?\s*[^\s|&;]+")
ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
WRAPPERS = {"nice": ("-n",), "time": (), "env": ()}  # wrapper: its options that take a value
ELISIONS = {"...", "…"}
INLINE_CODE = re.compile(r"(?<!`)`([^`]+)`(?!`)")


@dataclasses.dataclass(frozen=True)
class Command:
    path: str
    line: int  # 1-based: where the command (or its span) starts
    text: str  # as written, continuation lines joined
    words: tuple[str, ...]  # the simple command, from the interpreter on

    @property
    def where(self) -> str:
        inside = os.path.abspath(self.path).startswith(ROOT + os.sep)
        return f"{os.path.relpath(self.path, ROOT) if inside else self.path}:{self.line}"


def _split(text: str) -> list[list[str]]:
    """``text``'s simple commands, each a list of words (shell quoting and comments
    applied, redirections left out); ``[]`` when it is not shell (unbalanced quotes:
    prose)."""
    lexer = shlex.shlex(REDIRECTION.sub(" ", text), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return []
    commands, current = [], []
    for token in tokens:
        if token in SEPARATORS:
            commands.append(current)
            current = []
        else:
            current.append(token)
    commands.append(current)
    return [c for c in commands if c]


def _python_words(words: list[str]) -> list[str] | None:
    """The words from the Python interpreter on (elisions left out), or None when
    ``words`` runs no Python."""
    words = list(words)
    while words:
        if ASSIGNMENT.match(words[0]):
            words.pop(0)
        elif words[0] in WRAPPERS:
            takes_value = WRAPPERS[words.pop(0)]
            while words and words[0].startswith("-"):
                option = words.pop(0)
                if option in takes_value and words:
                    words.pop(0)
        else:
            break
    if not words or not PYTHON.match(words[0]):
        return None
    return [word for word in words if word not in ELISIONS]


def find(path: str, lines: list[str]) -> list[Command]:
    """Every Python command of a Markdown file (``lines`` without newlines)."""
    found: list[Command] = []

    def add(line: int, text: str) -> None:
        for words in _split(text):
            python = _python_words(words)
            if python is not None:
                found.append(Command(path, line, text.strip(), tuple(python)))

    fence, prose = None, []  # the open fence's language; (line, text) outside fences
    pending, pending_line = "", 0  # a command continued with `\`
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip().lower()
            continue
        if fence is None:
            prose.append((number, line))
            continue
        if fence not in SHELL_FENCES:
            continue
        text = stripped[2:] if stripped.startswith("$ ") else stripped
        if pending:
            text = pending + " " + text
        else:
            pending_line = number
        if text.endswith("\\"):
            pending = text[:-1].rstrip()
            continue
        pending = ""
        add(pending_line, text)
    # inline code spans, which may run over a line break within a paragraph
    starts, joined = [], ""
    for number, line in prose:
        starts.append((len(joined), number))
        joined += line + "\n"
    for match in INLINE_CODE.finditer(joined):
        line = max(n for offset, n in starts if offset <= match.start())
        add(line, match[1].replace("\n", " "))
    return sorted(found, key=lambda c: c.line)


class _Parsed(Exception):
    """Raised by the patched ``parse_args`` once the script's parser accepted the words."""


def parse_error(script: str, arguments: list[str]) -> str | None:
    """None when ``script``'s own parser accepts ``arguments``; else argparse's error line.

    The script runs as ``__main__`` (as ``python scripts/NAME.py`` runs it) until its
    first ``ArgumentParser.parse_args``, which parses and then stops it; the process's
    ``sys.argv``, ``sys.path`` and environment are put back afterwards.
    """
    with open(script, encoding="utf-8") as handle:
        if ".parse_args(" not in handle.read():  # never run a script that parses nothing
            return f"{os.path.relpath(script, ROOT)} parses no arguments with argparse"
    original = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed

    saved_argv, saved_path, saved_environ = sys.argv, list(sys.path), dict(os.environ)
    err = io.StringIO()
    argparse.ArgumentParser.parse_args = parse_and_stop  # type: ignore[method-assign]
    sys.argv = [script, *arguments]
    sys.path[:0] = [os.path.dirname(script), ROOT]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            runpy.run_path(script, run_name="__main__")
    except _Parsed:
        return None
    except SystemExit as exc:  # argparse's error (2), or --help (0)
        if exc.code in (0, None):
            return None
        errors = [line for line in err.getvalue().splitlines() if "error:" in line]
        return errors[-1] if errors else f"exited {exc.code} before parsing its arguments"
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.environ.clear()
        os.environ.update(saved_environ)
    return f"{os.path.relpath(script, ROOT)} ran to the end without parsing its arguments"


def problems(command: Command, cache: dict | None = None) -> list[str]:
    """What is wrong with one command, each as ``FILE:LINE: `COMMAND`: WHAT``."""
    words = list(command.words)
    found = []
    say = f"{command.where}: `{command.text}`: "
    if words[1:3] == ["-m", "venv"]:
        return []  # python3 -m venv .venv: the interpreter that makes the virtualenv
    if not VENV_PYTHON.match(words[0]):
        found.append(
            say + f"runs {words[0]!r}; write .venv/bin/python, the virtualenv's interpreter "
            "(a fresh shell after the README's install has no python that imports jaxgrad)"
        )
    script = next((w for w in words[1:] if not w.startswith("-")), None)
    if len(words) < 2 or words[1].startswith("-") or script is None:
        return found  # python -m MODULE, python -c CODE
    if not script.startswith("scripts/") or not script.endswith(".py"):
        return found
    path = os.path.join(ROOT, script)
    if not os.path.isfile(path):
        return [*found, say + f"{script} does not exist"]
    arguments = words[2:]
    key = (path, tuple(arguments))
    if cache is not None and key in cache:
        error = cache[key]
    else:
        error = parse_error(path, arguments)
        if cache is not None:
            cache[key] = error
    if error:
        found.append(say + error)
    return found


def check(paths: list[str], only=None) -> tuple[int, list[str]]:
    """``(commands checked, problems)`` for the Markdown files ``paths``; ``only``: a
    predicate on a command's text that selects the commands to check."""
    cache: dict = {}
    count, found = 0, []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            commands = find(path, handle.read().split("\n"))
        for command in commands:
            if only is not None and not only(command.text):
                continue
            count += 1
            found += problems(command, cache)
    return count, found
