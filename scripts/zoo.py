#!/usr/bin/env python
"""The model zoo: real torchvision, timm and Hugging Face models through from_torch.

Each model is built as a user would bring it (the library's own constructor, random
weights under a fixed seed, nothing downloaded; the transformers in tiny configurations,
the vision models on small images), converted with jaxgrad.nn.from_torch(module,
example=...), and held to torch on copied weights, at the tiers of the parity policy
(float64: rtol 1e-10, atol 1e-12; float32: rtol 1e-5, atol 1e-6 x max|reference|):

  f64 fwd+grads   float64, evaluation mode: the output and the gradient of every
                  parameter (of sum(c * output), c a fixed random cotangent)
  f32 fwd         the output in float32 (the float32 model, its own conversion)
  f32 grads       every parameter gradient in float32, outside the verdict
                  both float32 columns judged by jaxgrad.parity.compare's calibrated
                  rule (reference64: torch's float64 run of the same values): a leaf
                  outside the tier against torch's float32 passes when jaxgrad is
                  within the tier of the float64 answer, or within
                  CALIBRATION_MULTIPLE (5) times torch's own float32 distance from it
  train f64 x3    3 SGD-momentum steps in training mode, float64: loss, parameters,
                  momentum buffers and buffers (BatchNorm running statistics) after
                  every step; dropout and stochastic depth active, on torch's own
                  random draws (recorded, then given to the converted model); a
                  step on images with leaves outside the tier is run again in torch
                  (channels-last, the batch reversed, BatchNorm's statistics summed
                  by torch.mean, every value one ulp off with 3 seeds): a leaf
                  passes within 5x torch's own distance from itself
  shapes          float64, the same conversion (from_torch(..., batch_one=True)) at
                  batch 1, at a larger batch and, for sequence inputs, a longer length:
                  the output and every parameter gradient
  artifact        jaxgrad.nn.save_exported of the float64 evaluation program, reloaded
                  by load_exported in a fresh process that never imports torch: its
                  output on the example against torch's

and reports the parameter count, the front end from_torch chose (layers: torch.fx and
known layers; export: torch.export and the ATen table), the float64 conversion time,
the first call of the jitted training step (compilation plus one step), the random ops
in the training program with the elements torch's draws dropped, and a verdict (f64
fwd+grads, f32 fwd, train f64 x3, shapes and artifact). Each
cell shows the verdict and the largest absolute error; failures are listed under the
table with the exact error. Progress goes to stderr.

torchvision, timm and transformers are the optional `zoo` extra:
  pip install -c constraints.txt -e ".[zoo]"
A model whose library is missing is skipped and listed, with that command.

Exit status: 0 when every model that ran passed (also when every model was skipped:
the summary line says that nothing ran), 1 when any conversion or comparison failed,
2 for bad arguments.

Examples:
  python scripts/zoo.py --list
  python scripts/zoo.py --quick
  python scripts/zoo.py --models resnet18,transformers:BertModel --json zoo.json
  python scripts/zoo.py --models timm --capture export

The garden (issue 42): every model the libraries list (every torchvision builder, the
smallest model of every timm family, the Hugging Face architectures of
scripts/_garden.py's HF_MODELS, each from a tiny config), each in its own process with
a time limit, through the same checks, one JSON line per model appended to --records
as it goes (exit status 0 when the sweep completes: its outcomes are data):
  python scripts/zoo.py --garden --list
  nice -n 19 python scripts/zoo.py --garden --records garden.jsonl --resume
      --skip-columns shapes,artifact --timeout 300 --memory-limit 14
  python scripts/zoo.py --garden-report garden.jsonl --out docs/garden.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time

STARTED = time.perf_counter()  # the garden's startup line counts from here

import _cli  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--models",
        metavar="A,B",
        help="comma-separated models: a full name (torchvision:resnet18), a "
        "name unique across libraries (resnet18) or a library (timm); "
        "default: all (see --list)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="only the CI subset and its comparisons (what parity_tests/test_zoo.py runs)",
    )
    parser.add_argument(
        "--list",
        action="store_true",
        help="list the models (with their library's install state) and exit",
    )
    parser.add_argument(
        "--capture",
        choices=["auto", "layers", "export"],
        help="from_torch's front end for every model (default: each model's "
        "own; auto for all but timm:test_efficientnet, which exists to "
        "exercise export): auto takes the layer path when the model "
        "traces with torch.fx, else torch.export",
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write every row (per-leaf errors of failures) as JSON"
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print the per-leaf table of every comparison, not only failures",
    )
    garden = parser.add_argument_group("the garden (scripts/_garden.py)")
    garden.add_argument(
        "--garden",
        action="store_true",
        help="sweep the enumerated models (with --list: list them and exit)",
    )
    garden.add_argument("--records", metavar="PATH", help="the sweep's JSONL records (appended)")
    garden.add_argument(
        "--resume", action="store_true", help="skip the models already in --records"
    )
    garden.add_argument(
        "--rerun",
        metavar="OUTCOMES",
        help="with the records: run again the models whose last record is one of these "
        "outcomes (e.g. FAIL,TIMEOUT after a fix; implies --resume); the page counts "
        "each model's last record",
    )
    garden.add_argument(
        "--timeout",
        type=float,
        default=300,
        metavar="SECONDS",
        help="each model's time limit (default 300)",
    )
    garden.add_argument(
        "--skip-columns",
        metavar="A,B",
        default="",
        help="zoo columns left out of the sweep (e.g. shapes,artifact); recorded per model",
    )
    garden.add_argument(
        "--only",
        metavar="A,B",
        help="garden models: a library, torchvision:TASK, library:FAMILY or a full name",
    )
    garden.add_argument(
        "--memory-limit",
        type=float,
        metavar="GB",
        help="cap each model's process's address space (a model too large fails alone, "
        "as CRASH, instead of waking the out-of-memory killer)",
    )
    garden.add_argument(
        "--garden-report", metavar="RECORDS", help="write the garden's page from RECORDS"
    )
    garden.add_argument("--out", metavar="PATH", help="--garden-report's Markdown file")
    args = parser.parse_args(argv)
    if args.garden or args.garden_report:
        if args.quick or args.models or args.json or args.capture:
            parser.error(
                "--garden and --garden-report take none of --quick, --models, --json, --capture"
            )
        if args.garden and args.garden_report:
            parser.error("give --garden or --garden-report, not both")
        if args.garden and not args.list and not args.records:
            parser.error("--garden needs --records PATH (or --list)")
        if args.garden_report and not args.out:
            parser.error("--garden-report needs --out PATH")
        if args.timeout <= 0:
            parser.error(f"--timeout must be positive, got {args.timeout:g}")
        import _garden

        if args.rerun is not None:
            outcomes = [o for o in args.rerun.split(",") if o]
            unknown = [o for o in outcomes if o not in _garden.OUTCOMES]
            if not args.garden or not outcomes or unknown:
                parser.error(
                    f"--rerun (={args.rerun!r}) takes --garden and a comma-separated list "
                    f"of outcomes: {','.join(_garden.OUTCOMES)}"
                )

        unknown = set(filter(None, args.skip_columns.split(","))) - set(_garden.COLUMNS)
        if unknown:
            parser.error(
                f"--skip-columns: unknown column(s) {', '.join(sorted(unknown))}; the zoo's "
                f"columns are {', '.join(_garden.COLUMNS)}"
            )
        _cli.output_file(parser, "--out", args.out)
        return parser, args
    if args.quick and args.models:
        parser.error("--quick is a fixed subset; give --models or --quick, not both")
    _cli.output_file(parser, "--json", args.json)
    return parser, args


def _count(n) -> str:
    if n is None:
        return "-"
    return f"{n / 1e6:.1f}M" if n >= 1e5 else f"{n / 1e3:.0f}k"


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.1f} s"


HEADER = (
    f"{'model':<32} {'params':>6}  {'front':<6} {'convert':>8} {'1st step':>8}  "
    f"{'f64 fwd+grads':<14} {'f32 fwd':<14} {'train f64 x3':<14} "
    f"{'shapes':<14} {'artifact':<14} "
    f"{'random in training':<24} {'verdict':<7}  {'f32 grads':<14}"
)


def row_line(result) -> str:
    columns = result.columns
    if result.skipped:
        cells = ["-"] * 6
    elif result.error:
        cells = ["convert FAIL", "-", "-", "-", "-", "-"]
    else:
        cells = [
            columns[c].summary()
            for c in ("float64", "float32", "train", "shapes", "artifact", "float32_grads")
        ]
    return (
        f"{result.name:<32} {_count(result.parameters):>6}  {result.front_end or '-':<6} "
        f"{_seconds(result.convert_seconds):>8} {_seconds(result.compile_seconds):>8}  "
        f"{cells[0]:<14} {cells[1]:<14} {cells[2]:<14} {cells[3]:<14} {cells[4]:<14} "
        f"{result.randomness():<24} {result.verdict:<7}  {cells[5]}"
    ).rstrip()


def print_table(results, out=None) -> None:
    out = out or sys.stdout
    print(HEADER, file=out)
    print("-" * len(HEADER), file=out)
    for result in results:
        print(row_line(result), file=out)


def print_notes(results, *, verbose: bool, out=None) -> None:
    out = out or sys.stdout
    print("\nnotes:", file=out)
    for result in results:
        notes = [result.notes] + [n for n in (result.random_note, result.computed_in_note) if n]
        notes += [
            f"{column}: {cell.note}"
            for column, cell in result.columns.items()
            if cell.note and cell.status == "pass"
        ]
        print(f"  {result.name}: {'; '.join(n for n in notes if n)}", file=out)
    skipped = [r for r in results if r.skipped]
    if skipped:
        print("\nskipped (library not installed):", file=out)
        for result in skipped:
            print(f"  {result.name}: {result.skipped}", file=out)
    failed = [r for r in results if r.failures()]
    if failed:
        print("\nfailures (float32_grads: outside the verdict):", file=out)
        for result in failed:
            for line in result.failures():
                print(f"  {result.name}: {line}", file=out)
    if verbose:
        for result in results:
            for column, cell in result.columns.items():
                if cell.report is not None:
                    print(f"\n{result.name} {column}:", file=out)
                    print("    " + cell.report.table().replace("\n", "\n    "), file=out)


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    if args.garden or args.garden_report:
        import _garden

        return _garden.cli(parser, args, started=STARTED)
    import _zoo_models  # no torch: the names are checked before anything heavy loads

    try:
        entries = _zoo_models.select(",".join(_zoo_models.QUICK) if args.quick else args.models)
    except ValueError as error:
        parser.error(f"--models: {error}")
    if args.list:
        for entry in entries:
            state = (
                "" if _zoo_models.installed(entry.library) else f"  [{entry.library} not installed]"
            )
            print(f"{entry.name:<32} {entry.notes}{state}")
        return 0
    import torch

    torch.set_num_threads(1)  # a busy machine cannot then slow torch tenfold
    from parity_checks import _zoo

    absent = sorted({e.library for e in entries if _zoo_models.missing(e)})
    if absent:
        print(
            f"zoo: {', '.join(absent)} not installed; their models are skipped. Install the "
            f"zoo extra: {_zoo_models.INSTALL}",
            file=sys.stderr,
        )
    began = time.perf_counter()
    results = []
    for index, entry in enumerate(entries, 1):
        started = time.perf_counter()

        def progress(stage, entry=entry, index=index, started=started):
            print(
                f"[{index}/{len(entries)}] {entry.name}: {stage} "
                f"({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

        columns = _zoo_models.QUICK[entry.name] if args.quick else _zoo.COLUMNS
        result = _zoo.run_model(
            entry, columns=columns, capture=args.capture or entry.capture, progress=progress
        )
        print(
            f"[{index}/{len(entries)}] {entry.name}: {result.verdict} ({result.seconds:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        for line in result.failures():
            print(f"    {line}", file=sys.stderr, flush=True)
        results.append(result)
    elapsed = time.perf_counter() - began
    print_table(results)
    print_notes(results, verbose=args.verbose)
    ran = [r for r in results if not r.skipped]
    failed = [r for r in ran if r.verdict == "FAIL"]
    summary = (
        f"\n{len(ran) - len(failed)} passed, {len(failed)} failed, "
        f"{len(results) - len(ran)} skipped ({len(results)} models, {elapsed:.1f} s)"
    )
    if not ran:
        summary += f"; nothing ran: install the zoo extra ({_zoo_models.INSTALL})"
    print(summary)
    if args.json:
        import jax

        with open(args.json, "w") as handle:
            json.dump(
                {
                    "passed": not failed,
                    "ran": len(ran),
                    "torch": torch.__version__,
                    "jax": jax.__version__,
                    "versions": _zoo_models.versions(),
                    "seconds": round(elapsed, 1),
                    "models": [r.to_dict() for r in results],
                },
                handle,
                indent=1,
            )
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
