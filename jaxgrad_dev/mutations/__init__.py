"""The mutation corpus: realistic convention bugs the test suite must catch.

Contract: every ``*.yaml`` file in this directory holds a list of entries, one YAML
flow mapping per line, each a small exact edit of a convention-critical line:

==============  ================================================================
key             meaning
==============  ================================================================
``id``          unique name, kebab-case (``adam-eps-inside-sqrt``)
``file``        the edited file, relative to the repository root
``original``    the exact snippet; it must occur exactly once in ``file``
``replacement`` what the snippet becomes (``\\n`` in a double-quoted string for
                a multi-line edit)
``tests``       pytest node ids or files (relative to the root) that must fail
``why``         one line: the convention the edit breaks, what torch does
``parity``      optional: ``scripts/parity.py --filter`` texts of the report
                rows that report a number the edit changes; absent or ``[]``
                when the report prints nothing it changes (defaults,
                initialisation, checkpoints, error paths…)
``equivalent``  optional: the argument that the edit cannot change any result;
                such an entry is expected to survive and is not counted
==============  ================================================================

An entry whose ``original`` no longer occurs exactly once (after a refactor) is
*stale*: ``scripts/mutants.py`` names it and fails, and so does the suite's
``test_mutations.py``; it is never skipped. A file per area keeps additions for
new code to one line in that area's file (or a new file).

``corpus`` reads and checks the entries; ``runner`` applies them in a scratch copy of
the repository and runs their tests (``scripts/mutants.py`` is the command line).
"""
