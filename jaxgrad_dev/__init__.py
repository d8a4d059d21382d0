"""``jaxgrad_dev``: the project's own development tools, neither the library nor its tests.

What both the test suite (``parity_tests/``) and the command-line scripts
(``scripts/``) need lives here, so that each imports it and neither imports the other:

- ``precision``: ``jax_precision(dtype)``, x64 and highest-precision matmuls for a check;
- ``layer_parity``: one layer in both frameworks, outputs and every gradient compared
  (the parity report's layer rows and the layer tests);
- ``module_db``: every sample of PyTorch's ``module_db`` run in both frameworks (the
  conformance tests and ``scripts/conformance.py``);
- ``mutations``: the mutation corpus (``*.yaml``) and the machinery that applies it in
  a scratch copy (``scripts/mutants.py``, ``parity_tests/test_mutations.py``).

The direction is one way: ``jaxgrad_dev`` imports ``jaxgrad`` (and torch), never
``parity_tests`` or ``scripts``; ``jaxgrad`` never imports ``jaxgrad_dev``
(``parity_tests/test_graph.py`` checks both).
"""
