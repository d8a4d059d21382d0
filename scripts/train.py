#!/usr/bin/env python
"""Train a model with jaxgrad (jit-compiled), PyTorch (imperative loop), or both side by side.

The model: an MLP preset, the CNN and sequence presets, or any torch model converted
with from_torch (--model FILE.py:NAME, package.module:NAME, torchvision:NAME, timm:NAME,
transformers:CLASS, as port.py takes them). The data: scikit-learn's 8×8 digits by
default (no download), or --data-dir: FashionMNIST's IDX files, an image folder
(torchvision's ImageFolder layout, --image-size) or a .npz of token ids. Prints the
devices used, a progress bar per epoch (loss, examples/s), a per-epoch table of train
loss, test loss and test accuracy, and ends with one line per framework:
`jax test accuracy: 97.9%`.

With --framework both, the two frameworks start from the same weights (jaxgrad's
initialisation copied into torch, or the torch model's own, converted) and see the same
batches in the same order; the script reports after every epoch how far their
parameters (and buffers) have drifted. --precision float64 proves a training at the
float64 tier (the MLP preset, the CNN presets and converted models).

Checkpoints: --checkpoint-dir DIR --checkpoint-every N writes params (safetensors,
torch state_dict keys; with buffers, the whole state_dict), optimizer state, step, data
position and seed atomically every N steps (both frameworks: DIR/jax and DIR/torch;
with --scheduler, the scheduler's step too); --resume continues bit-exactly from the
latest, --resume-from NAME from an older one, on any device or process count.
Devices: jax trains data-parallel over every device of --device (--shard data), with
parameters and optimizer state split over them (--shard fsdp), or on one (--shard
none); with JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID set, over
every device of every process (jax.distributed), process 0 writing the outputs and
printing the log and progress bars.
What a model cannot do is refused at start with one line: --activation and
--precision bfloat16 are the MLP's and sequence presets' (a converted model trains in
its own dtype); the CNN presets take the 1×8×8 digits only; the sequence presets refuse
--data-dir, --activation and --precision float64; a forward returning a dict or a
ModelOutput of several tensors and no 'logits' needs --output-key KEY; torch's
bfloat16 run is refused where torch has no bfloat16 kernel for the model (its CPU LSTM).
Ctrl-C (SIGINT) or SIGTERM finishes the step that is running, writes a final
checkpoint (with --checkpoint-dir), prints it and the command that resumes, and
exits 130 / 143; a second signal stops at once.
A NaN/inf loss stops the run naming the step and the first parameter whose
gradient is not finite (exit status 3); the last good checkpoint is kept.

Examples:
  python scripts/train.py                                   # digits, jax, ~97-98 %
  python scripts/train.py --framework both --plot loss.png
  python scripts/train.py --model 512,256 --optimizer sgd --lr 0.05 --momentum 0.9
  python scripts/train.py --model resnet --framework both --epochs 5   # BatchNorm, torch.fx
  python scripts/train.py --checkpoint-dir ckpt --checkpoint-every 50
  python scripts/train.py --checkpoint-dir ckpt --checkpoint-every 50 --resume
  python scripts/train.py --data-dir ~/data/fashion-mnist --epochs 5 --batch-size 128
  python scripts/train.py --model transformer --optimizer adam --framework both
  python scripts/train.py --model torchvision:resnet18 --kwargs '{"num_classes": 3}' \
      --data-dir my_images --image-size 32 --framework both --precision float64
  python scripts/train.py --model mynet.py:Net --optimizer adamw \
      --scheduler CosineAnnealingLR --checkpoint-dir ckpt --checkpoint-every 100

Exit status: 0 done, 2 bad arguments / checkpoint problems, 3 non-finite loss,
130 / 143 stopped by SIGINT / SIGTERM.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shlex
import signal
import sys
import time

import _cli
import _model_spec
import numpy as np

MODELS = {  # hidden widths; the input and output widths come from the data
    "small": (128,),
    "medium": (256, 128),
    "large": (512, 256),
    "lesson": (256,),  # the lessons' 784-256-10 network on FashionMNIST
}
CNN_MODELS = ("cnn", "resnet")  # torchref.models.CNN_MODELS: 1×8×8 digit images
# sequence classifiers of the digits (torchref.sequence_models; jaxgrad twins by from_torch):
# 8 rows of 8 pixels through an LSTM / GRU, or the 64 intensities as Embedding tokens
SEQUENCE_MODELS = ("transformer", "lstm", "gru")
OPTIMIZER_DEFAULT_LR = {"sgd": 0.05, "adam": 1e-3, "adamw": 1e-3, "rmsprop": 1e-3}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = parser.add_argument_group("data and model")
    data.add_argument(
        "--data-dir",
        metavar="PATH",
        help="your data (default: the 8×8 digits): a FashionMNIST IDX directory, an "
        "image folder (one subdirectory per class, PNG/JPEG..., torchvision's ImageFolder; "
        "or train/ and val/ or test/ of them) or a .npz of token ids (tokens, labels) "
        "for a --model MODULE:NAME sequence classifier; see docs/training.md",
    )
    data.add_argument(
        "--image-size",
        type=int,
        metavar="S",
        help="image folder: resize every image to S×S (bilinear, torchvision's "
        "Resize((S, S))); needed when the images' sizes differ",
    )
    data.add_argument(
        "--model",
        default="medium",
        help=f"{' or '.join(CNN_MODELS)} (CNNs on 8×8 digit images), "
        f"{', '.join(SEQUENCE_MODELS)} (sequence models of the digits), MLP "
        f"hidden widths: a preset ({', '.join(f'{k}={list(v)}' for k, v in MODELS.items())}) "
        "or a comma list such as 256,128 (default: medium); or any torch model, "
        "converted with from_torch: FILE.py:NAME, package.module:NAME, torchvision:NAME, "
        "timm:NAME or transformers:CLASS (with --config), as port.py takes them, "
        "built with random weights from --seed and --kwargs; it reads images "
        "(n, C, H, W) (the digits as 1×8×8) and returns logits (n, classes)",
    )
    data.add_argument(
        "--kwargs",
        default="{}",
        metavar="JSON",
        help="--model MODULE:NAME: keyword arguments of the class or factory as JSON, "
        "e.g. '{\"num_classes\": 10}'",
    )
    data.add_argument(
        "--config",
        metavar="JSON",
        help="--model transformers:CLASS: the config's fields as JSON",
    )
    data.add_argument(
        "--output-key",
        metavar="KEY",
        help="--model MODULE:NAME: "
        + _model_spec.OUTPUT_KEY_HELP.format(verb="train on (as the logits)"),
    )
    data.add_argument(
        "--standardize",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="scale each input feature to zero mean, unit variance with the "
        "training set's statistics (default: on)",
    )
    data.add_argument(
        "--activation", default="relu", choices=["relu", "tanh", "sigmoid", "gelu", "leaky_relu"]
    )
    opt = parser.add_argument_group("optimisation")
    opt.add_argument("--optimizer", default="sgd", choices=sorted(OPTIMIZER_DEFAULT_LR))
    opt.add_argument("--lr", type=float, help="learning rate (default: 0.05 sgd, 1e-3 others)")
    opt.add_argument(
        "--momentum", type=float, default=0.9, help="sgd / rmsprop momentum (default: 0.9)"
    )
    opt.add_argument(
        "--weight-decay",
        type=float,
        default=None,
        help="torch semantics: L2 for sgd/adam/rmsprop, decoupled for adamw",
    )
    # --scheduler (issue 12): the same torch scheduler in both frameworks
    opt.add_argument(
        "--scheduler",
        metavar="NAME[:K=V,...]",
        help="learning-rate scheduler per optimizer step, torch's class name and "
        "arguments, e.g. CosineAnnealingLR or StepLR:step_size=200,gamma=0.5 "
        "(T_max / total_steps / total_iters default to the run's steps; "
        "OneCycleLR cycles the momentum / betas[0] too, as torch's default)",
    )
    opt.add_argument("--epochs", type=int, default=20)
    opt.add_argument("--batch-size", type=int, default=32, help="examples per micro-batch")
    opt.add_argument(
        "--keep-last-batch",
        action="store_true",
        help="also train on each epoch's shorter last batch (the examples the full "
        "batches leave), in both frameworks: one step of its own shape (default: full "
        "batches only, torch's DataLoader(drop_last=True)); not with --accumulate",
    )
    opt.add_argument(
        "--accumulate",
        type=int,
        default=1,
        metavar="K",
        help="micro-batches per optimizer step (step = K × batch-size examples)",
    )
    opt.add_argument(
        "--clip", type=float, help="clip the gradient's total 2-norm (clip_grad_norm_)"
    )
    opt.add_argument(
        "--precision",
        default="float32",
        choices=["float32", "bfloat16", "float64"],
        help="bfloat16: bf16 compute, float32 master weights and optimizer (the MLP and "
        "sequence presets); float64: weights, buffers, data, gradients and optimizer state "
        "in float64 in both frameworks (the MLP preset, the CNN presets and converted "
        "models), so --framework both proves the training at the float64 tier",
    )
    opt.add_argument("--seed", type=int, default=0, help="initialisation and data-order seed")
    run = parser.add_argument_group("frameworks and devices")
    run.add_argument("--framework", default="jax", choices=["jax", "torch", "both"])
    run.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "gpu", "tpu"],
        help="jax: data-parallel over every device of this kind; torch: cpu/cuda",
    )
    run.add_argument(
        "--shard",
        default="data",
        choices=["none", "data", "fsdp", "tensor"],
        help="jax: where parameters and optimizer state live. data: replicated on every "
        "device (default); fsdp: each split along one dimension over the devices "
        "(jaxgrad.train.fsdp); tensor: Linear, attention and Embedding matrices split "
        "by rows over each process's devices, the rest replicated (the batch split over "
        "the processes only); none: one device. Otherwise the batch is split over "
        "every device",
    )
    run.add_argument(
        "--fused",
        action="store_true",
        help="jax: run each stretch of steps (an epoch, cut at checkpoints) as "
        "one call of a rolled loop (= --strategy epoch)",
    )
    run.add_argument(
        "--strategy",
        metavar="NAME",
        help="jax execution strategy: auto (default: probe step, then epoch, "
        "unroll:4 and unrolled as far as this run is long enough to win "
        "back their probe, on a few batches; keep the fastest for this "
        "run's length; cached in $JAXGRAD_CACHE_DIR or ~/.cache/jaxgrad), "
        "step, epoch, unroll:K or unrolled; $JAXGRAD_STRATEGY sets the "
        "default",
    )
    run.add_argument("--compile", action="store_true", help="torch: torch.compile the model")
    _cli.add_keep_host_memory(run)
    out = parser.add_argument_group("checkpoints and output")
    out.add_argument(
        "--checkpoint-dir",
        help="write checkpoints here (with --framework both: DIR/jax and DIR/torch)",
    )
    out.add_argument("--checkpoint-every", type=int, metavar="N", help="steps between checkpoints")
    out.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    out.add_argument(
        "--resume-from",
        metavar="NAME",
        help="continue from this checkpoint of the directory (e.g. ckpt-00000050) "
        "instead of the one LATEST names; implies --resume",
    )
    out.add_argument("--save", metavar="PATH", help="final params as safetensors (torch keys)")
    out.add_argument("--plot", metavar="PATH", help="loss-curve PNG")
    out.add_argument("--json", metavar="PATH", help="history as JSON")
    out.add_argument("--no-progress", action="store_true", help="no progress bars")
    # Fault injection for the resume test: SIGKILL this process after global step N.
    out.add_argument("--debug-kill-at-step", type=int, help=argparse.SUPPRESS)
    return parser


def parse_args(argv=None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """Parse and validate everything that needs no data and no framework (exit 2)."""
    parser = parser or build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.argv = argv  # to print the exact command that resumes this run
    args.spec = None
    args.kwargs = _model_spec.json_object(parser, "--kwargs", args.kwargs)
    if ":" in args.model:  # any torch model, as port.py takes it
        args.spec = _model_spec.parse_spec(parser, "--model", args.model, args.config)
        _model_spec.check_spec(parser, "--model", args.spec, args.kwargs)
    elif args.kwargs or args.config is not None:
        parser.error(
            "--kwargs and --config build a --model MODULE:NAME (a torch model to convert); "
            f"--model {args.model} is a preset"
        )
    elif args.output_key is not None:
        parser.error(
            "--output-key chooses among the outputs of a --model MODULE:NAME (a torch model "
            f"to convert); --model {args.model} is a preset, whose forward returns logits"
        )
    # ---- torch modules converted with from_torch (torchref's CNNs, or --model MODULE:NAME),
    # trained by StatefulTrainer (buffers and keyed randomness)
    if module_model(args):
        args.hidden = ()
        refused = [
            flag
            for flag, used in (
                (
                    "--data-dir (the CNNs take 1×8×8 digits)",
                    args.data_dir and args.spec is None,
                ),
                ("--activation", args.activation != "relu"),
                ("--precision bfloat16", args.precision == "bfloat16"),
            )
            if used
        ]
        if refused:
            parser.error(f"--model {args.model} does not support {', '.join(refused)}")
    # ---- end of converted torch modules
    elif args.model in SEQUENCE_MODELS:  # torchref.sequence_models; args.hidden None marks them
        args.hidden = None
        if args.data_dir:
            parser.error(
                f"--model {args.model} does not support --data-dir (it reads the "
                "8×8 digits as 8 rows of 8 pixels or 64 tokens)"
            )
        if args.activation != "relu":  # the architecture is fixed: it would be ignored
            parser.error(
                f"--model {args.model} does not support --activation (its "
                "activations are torchref.sequence_models')"
            )
    else:
        args.hidden = _cli.widths(parser, "--model", args.model, MODELS)
    _cli.at_least(parser, args, 1, "epochs", "batch_size", "accumulate", "checkpoint_every")
    if args.keep_last_batch and args.accumulate != 1:
        parser.error(
            "--keep-last-batch with --accumulate: a last batch shorter than a step does not "
            "split into equal micro-batches; give one of them"
        )
    _cli.at_least(parser, args, 0, "seed")
    _cli.positive_float(parser, args, "lr", "clip")
    _cli.non_negative_float(parser, args, "momentum", "weight_decay")
    if args.lr is None:
        args.lr = OPTIMIZER_DEFAULT_LR[args.optimizer]
    if args.scheduler:
        try:
            args.scheduler = parse_scheduler(args.scheduler)
        except ValueError as exc:
            parser.error(f"--scheduler: {exc}")
    args.resume = args.resume or args.resume_from is not None
    for option, given in (("--resume", args.resume), ("--checkpoint-every", args.checkpoint_every)):
        if given and not args.checkpoint_dir:
            parser.error(f"{option} needs --checkpoint-dir")
    _cli.writable_dir(parser, "--checkpoint-dir", args.checkpoint_dir)
    if args.data_dir is not None and not os.path.exists(args.data_dir):
        parser.error(f"--data-dir {args.data_dir}: does not exist")
    if args.image_size is not None:
        _cli.at_least(parser, args, 1, "image_size")
        if not args.data_dir:
            parser.error("--image-size resizes an image folder's images; give --data-dir")
    _cli.output_files(parser, args, "save", "plot", "json")
    if args.resume_from is not None:
        args.resume_from = os.path.basename(os.path.normpath(args.resume_from))
        for framework in frameworks(args):
            path = os.path.join(checkpoint_dir(args, framework), args.resume_from)
            if not os.path.isdir(path):
                parser.error(f"--resume-from {args.resume_from}: no checkpoint {path}")
    # last: the strategy's parser lives in jaxgrad (whose import starts jax), so every
    # other bad argument above is refused without it
    from jaxgrad.train.strategy import parse_strategy

    try:  # --fused is --strategy epoch
        given = args.strategy or ("epoch" if args.fused else None)
        args.strategy = (
            parse_strategy(given, "--strategy")
            if given
            else parse_strategy(os.environ.get("JAXGRAD_STRATEGY", "auto"), "$JAXGRAD_STRATEGY")
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.fused and args.strategy != "epoch":
        parser.error(f"--fused is --strategy epoch; it contradicts --strategy {args.strategy}")
    if args.scheduler:  # every argument named and checked now, before any data or training
        try:
            check_scheduler(*args.scheduler, lr=args.lr, total_steps=1000)
        except (TypeError, ValueError) as exc:
            parser.error(f"--scheduler {args.scheduler[0]}: {exc}")
    return args


def check_scheduler(name: str, given: dict, *, lr: float, total_steps: int) -> None:
    """Raise ``ValueError`` / ``TypeError`` unless ``--scheduler NAME:K=V,...`` builds:
    an unknown name, a required argument missing or an unknown one given (each named,
    with the arguments ``NAME`` takes), or a value its factory refuses.

    ``total_steps`` stands in for the run's length (``T_max`` and the like default to it).
    """
    import inspect

    from jaxgrad.optim import schedulers

    kwargs = schedulers.run_kwargs(name, lr, total_steps, **given)  # unknown name: ValueError
    parameters = inspect.signature(schedulers.SCHEDULERS[name]).parameters
    supplied = set(kwargs) | ({"lr"} if name != "OneCycleLR" else set())
    implied = {"lr", "max_lr", *schedulers._LENGTH_ARGUMENT.values()}
    missing = [k for k, p in parameters.items() if p.default is p.empty and k not in supplied]
    unknown = [k for k in given if k not in parameters or k == "lr"]
    if missing or unknown:
        takes = ",".join(
            f"{k}=..." if p.default is p.empty else f"{k}={p.default!r}"
            for k, p in parameters.items()
            if k not in implied
        )
        problems = (
            [f"missing required argument{'s' if len(missing) > 1 else ''} {', '.join(missing)}"]
            if missing
            else []
        ) + (
            [f"unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}"]
            if unknown
            else []
        )
        raise ValueError(
            f"{'; '.join(problems)}; expected {name}:{takes} (torch's "
            f"{name} arguments; the learning rate comes from --lr"
            + (
                ", the schedule's length from the run's steps"
                if name in schedulers._LENGTH_ARGUMENT
                else ""
            )
            + ")"
        )
    schedulers.for_run(name, lr, total_steps, **given)  # the values: each factory checks its own


def module_model(args) -> bool:
    """A torch module converted with ``from_torch`` and trained with its buffers: the CNN
    presets, or ``--model MODULE:NAME``."""
    return args.model in CNN_MODELS or args.spec is not None


def frameworks(args) -> list[str]:
    return ["jax", "torch"] if args.framework == "both" else [args.framework]


def resume_command(args, resume_from: str | None = None) -> str:
    """The command line that continues this run: its own arguments plus ``--resume``
    (or ``--resume-from NAME``), without debugging options."""
    kept, skip = [], False
    for arg in args.argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--resume-from", "--debug-kill-at-step"):
            skip = "=" not in arg
            continue
        if name != "--resume":
            kept.append(arg)
    kept += ["--resume-from", resume_from] if resume_from else ["--resume"]
    return shlex.join([interpreter(), os.path.relpath(__file__), *kept])


def interpreter() -> str:
    """The Python running this script, as a command a user types from here: relative
    (``.venv/bin/python`` after the README's install) where it lies below the current
    directory, else its full path. A bare ``python`` in a fresh shell is another
    interpreter, without jaxgrad."""
    relative = os.path.relpath(sys.executable)
    return sys.executable if relative.startswith("..") else relative


def parse_scheduler(spec: str) -> tuple[str, dict]:
    """``"StepLR:step_size=5,gamma=0.5"`` -> ``("StepLR", {"step_size": 5, "gamma": 0.5})``."""
    import ast

    name, _, rest = spec.partition(":")
    kwargs = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key.isidentifier():
            raise ValueError(f"{item!r} is not KEY=VALUE")
        try:
            kwargs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ValueError(f"{item!r}: {value!r} is not a Python literal") from None
    return name, kwargs


def steps_per_epoch(args, dataset) -> int:
    """Optimizer steps in an epoch: full batches, and the short last one if kept."""
    step = args.batch_size * args.accumulate
    n = len(dataset.x_train)
    return -(-n // step) if args.keep_last_batch else n // step


def total_steps(args, dataset) -> int:
    return steps_per_epoch(args, dataset) * args.epochs


def optimizer_kwargs(args) -> dict:
    """The same keyword arguments for ``jaxgrad.optim.<name>`` and ``torch.optim.<Name>``."""
    kwargs = {"lr": args.lr}
    if args.weight_decay is not None:
        kwargs["weight_decay"] = args.weight_decay
    if args.optimizer in ("sgd", "rmsprop") and args.momentum:
        kwargs["momentum"] = args.momentum
    return kwargs


def checkpoint_dir(args, framework: str) -> str | None:
    """``--checkpoint-dir`` itself for one framework, ``DIR/<framework>`` for both."""
    if not args.checkpoint_dir or args.framework != "both":
        return args.checkpoint_dir
    return os.path.join(args.checkpoint_dir, framework)


def scheduler_spec(args, dataset) -> list | None:
    """``[name, kwargs]`` of the run's scheduler with the arguments the run implies
    (``T_max`` / ``total_steps`` / ``total_iters`` from the total steps, so from
    ``--epochs``), as both frameworks build it; None without ``--scheduler``."""
    if not args.scheduler:
        return None
    from jaxgrad.optim.schedulers import run_kwargs

    name, given = args.scheduler
    return [name, run_kwargs(name, args.lr, total_steps(args, dataset), **given)]


def run_config(args, dataset) -> dict:
    """What a checkpoint must agree with to be resumed (not the epoch count, unless a
    scheduler's length depends on it)."""
    return {
        "dataset": dataset.name,
        "hidden": list(args.hidden or [args.model]),
        "activation": args.activation,
        "standardize": args.standardize,
        "optimizer": args.optimizer,
        "optimizer_kwargs": optimizer_kwargs(args),
        "scheduler": scheduler_spec(args, dataset),
        "batch_size": args.batch_size,
        "accumulate": args.accumulate,
        "clip": args.clip,
        "precision": args.precision,
        "seed": args.seed,
        "fused": args.fused,
        # only when set: checkpoints of runs without it resume as before
        **({"keep_last_batch": True} if args.keep_last_batch else {}),
    }


class Progress:
    """A tqdm bar per epoch showing loss and examples/s (silent with --no-progress)."""

    def __init__(
        self,
        enabled: bool,
        framework: str,
        epoch: int,
        total: int,
        step_examples: int,
        initial: int = 0,
    ):
        self.bar = None
        self.began = time.perf_counter()
        self.step_examples, self.done = step_examples, 0
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                initial=initial,
                desc=f"{framework:>5} epoch {epoch + 1}",
                unit="step",
                leave=False,
                file=sys.stderr,
                dynamic_ncols=True,
            )

    def update(self, losses: np.ndarray) -> None:
        self.done += len(losses)
        if self.bar is not None:
            rate = self.done * self.step_examples / max(time.perf_counter() - self.began, 1e-9)
            self.bar.set_postfix(
                loss=f"{float(losses[-1]):.4f}", ex_s=f"{rate:,.0f}", refresh=False
            )
            self.bar.update(len(losses))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Run:
    """One framework's side of the run: ``trainer``, ``evaluate``, ``params_numpy``."""

    trainer = None

    @property
    def epoch(self) -> int:
        return self.trainer.epoch

    def train_epoch(self, x, y, on_steps):
        return self.trainer.train_epoch(x, y, on_steps=on_steps)


class JaxRun(_Run):
    framework = "jax"

    def __init__(self, args, dataset, sizes, params=None):
        import jax

        import jaxgrad.train as jtrain
        from jaxgrad import losses, nn

        if args.framework == "both" and args.device != "cpu":
            # torch's float32 matmuls are full float32; jax's GPU default is TF32
            jax.config.update("jax_default_matmul_precision", "float32")
        if args.hidden is None:  # a sequence model: the twin of torch's, same weights
            from torchref.sequence_models import sequence_model

            self.model, initial = nn.from_torch(sequence_model(args.model, seed=args.seed))
            params = initial if params is None else params
        else:
            # float64: x64 is on (train()), the model and its weights in float64
            dtype = "float64" if args.precision == "float64" else None
            self.model = nn.mlp(sizes, args.activation, dtype=dtype)
        if params is None:
            params = self.model.init(jax.random.key(args.seed))
        optimizer = jax_optimizer(args, dataset)
        self.compute_dtype = "bfloat16" if args.precision == "bfloat16" else None
        self.loss_fn = losses.cross_entropy
        options, self.devices = trainer_options(args, dataset)
        self.trainer = jtrain.Trainer(
            self.model,
            self.loss_fn,
            optimizer,
            params,
            compute_dtype=self.compute_dtype,
            strategy=args.strategy,
            **options,
        )
        self._evaluate = jtrain.evaluate

    def evaluate(self, x, y) -> dict:
        return self._evaluate(
            self.model,
            self.trainer.params,
            x,
            y,
            loss_fn=self.loss_fn,
            compute_dtype=self.compute_dtype,
        )

    def params_numpy(self) -> dict:
        from jaxgrad.train.checkpoint import gather_to_host

        return self.model.state_dict(gather_to_host(self.trainer.params))


def trainer_options(args, dataset) -> tuple[dict, str]:
    """The jax trainer's options every model shares (batches, devices, sharding,
    checkpoints), and the devices described for the log."""
    import jaxgrad.train as jtrain

    jtrain.initialize_distributed()
    devices = jtrain.select_devices(args.device)
    if args.shard == "none":
        devices = devices[:1]
    described = jtrain.sharding.describe_devices(devices)
    if args.shard == "fsdp":
        described += ", parameters and optimizer state sharded (fsdp)"
    elif args.shard == "tensor":
        described += (
            ", Linear/attention/Embedding matrices split over each process's devices (tensor)"
        )
    options = dict(
        batch_size=args.batch_size,
        seed=args.seed,
        drop_last=not args.keep_last_batch,
        accumulate=args.accumulate,
        total_steps=total_steps(args, dataset),
        devices=devices,
        shard=args.shard,
        checkpoint_dir=checkpoint_dir(args, "jax"),
        checkpoint_every=args.checkpoint_every,
        config=run_config(args, dataset),
    )
    return options, described


def jax_optimizer(args, dataset):
    """``--optimizer`` with torch's semantics, ``--scheduler`` as its learning rate and
    ``--clip`` before it (``jaxgrad.train.build_optimizer``)."""
    import jaxgrad.train as jtrain
    from jaxgrad import optim

    kwargs = optimizer_kwargs(args)
    if args.scheduler:
        name, given = args.scheduler
        kwargs["lr"] = optim.schedulers.for_run(name, args.lr, total_steps(args, dataset), **given)
    factory = getattr(optim, args.optimizer)
    # OneCycleLR cycles momentum / betas[0] as torch's does (cycle_momentum=True)
    kwargs = optim.schedulers.with_cycled_momentum(factory, kwargs)
    return jtrain.build_optimizer(factory(**kwargs), clip=args.clip)


def torch_module(args, dataset):
    """The torch module of a converted run, as built for both frameworks: a CNN preset or
    ``--model MODULE:NAME`` under ``torch.manual_seed(--seed)``, in float64 with
    ``--precision float64``, checked on two training examples (its forward must take
    them and return logits `(2, classes)` with at least the data's classes).

    Raises:
      ValueError: the forward fails on the data's inputs, or returns something else.
    """
    import torch

    import torchref

    if args.spec is None:
        torch.manual_seed(args.seed)  # torch's initialisation, copied to both sides
        module = torchref.models.CNN_MODELS[args.model]()
    else:
        parser = build_parser()
        built = _model_spec.factory(parser, "--model", args.spec, args.kwargs)
        module = _model_spec.build_module(parser, args.spec, args.kwargs, built, seed=args.seed)
    if args.precision == "float64":
        module = module.double()
    example = torch.from_numpy(dataset.x_train[:2])
    was_training = module.training
    try:
        with torch.no_grad():
            outputs = module.eval()(example)
    except Exception as exc:  # noqa: BLE001 - the user's forward, on the data's inputs
        raise ValueError(
            f"--model {args.model}: its forward fails on the data's inputs "
            f"{tuple(example.shape)} {example.dtype} ({dataset.name}): "
            f"{type(exc).__name__}: {_cli._first_line(exc)}; give it data it reads "
            "(--data-dir: an image folder's images are (n, 3, H, W) at --image-size, "
            "a .npz's tokens (n, length)) or --kwargs that fit the data"
        ) from None
    finally:
        module.train(was_training)
    # a dict or ModelOutput: the one tensor trained on, by _model_spec's rule (issue 55)
    key = _model_spec.output_key(
        outputs, args.output_key, f"--model {args.model}", "train on (as the logits)"
    )
    if key is not None:
        # torch.export captures it as the model returning outputs[key] alone, as before
        outputs, module = outputs[key], _model_spec.select_output(module, key)
        args.capture = "export"
    args.draws_randomness = draws_randomness(module, example)  # of the output trained on
    if not isinstance(outputs, torch.Tensor) and isinstance(logits_of(outputs), torch.Tensor):
        # a tuple (its first element) or another object with .logits: the forward both
        # frameworks train returns the logits alone. torch.export captures
        # this instance's forward (torch.fx would trace the class's): export it is
        outputs, forward = logits_of(outputs), module.forward
        module.forward = functools.wraps(forward)(lambda *a, **k: logits_of(forward(*a, **k)))
        args.capture = "export"
    if not isinstance(outputs, torch.Tensor) or outputs.ndim != 2:
        shape = tuple(outputs.shape) if isinstance(outputs, torch.Tensor) else None
        raise ValueError(
            f"--model {args.model}: its forward returns "
            + ("" if key is None else f"under {key!r} a ")
            + f"{type(outputs).__name__}{'' if shape is None else f' of shape {shape}'}; "
            "train.py trains classifiers whose forward returns logits (batch, classes)"
        )
    if outputs.shape[1] < dataset.num_classes:
        raise ValueError(
            f"--model {args.model}: its forward returns {outputs.shape[1]} logits, the data "
            f"has {dataset.num_classes} classes; build it with more, e.g. --kwargs "
            f"'{{\"num_classes\": {dataset.num_classes}}}'"
        )
    return module


def logits_of(outputs):
    """The logits in a model's outputs: ``outputs.logits`` (a Hugging Face
    ``ModelOutput``), the first element of a tuple, or ``outputs`` itself."""
    if hasattr(outputs, "logits"):
        return outputs.logits
    if isinstance(outputs, (tuple, list)) and outputs:
        return outputs[0]
    return outputs


def draws_randomness(module, example) -> bool:
    """Whether ``module``'s training-mode forward draws random numbers (dropout, drop
    path): two forwards of a copy under two torch seeds differ. False when the module
    cannot be copied."""
    import copy

    import torch

    try:
        twin = copy.deepcopy(module).train()
    except Exception:  # noqa: BLE001 - an uncopyable module: nothing to say
        return False
    state = torch.random.get_rng_state()  # the user's draws are not ours to move
    try:
        with torch.no_grad():
            torch.manual_seed(1)
            first = logits_of(twin(example))
            torch.manual_seed(2)
            second = logits_of(twin(example))
    finally:
        torch.random.set_rng_state(state)
    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)):
        return False  # not logits: the output check that follows refuses the model
    return not torch.equal(first, second)


class JaxModuleRun(_Run):
    """A torch module converted with ``from_torch`` (params and buffers: the CNN presets,
    or ``--model MODULE:NAME``), trained by ``StatefulTrainer``."""

    framework = "jax"

    def __init__(self, args, dataset, sizes, params=None):
        import torch

        from jaxgrad import losses, nn
        from jaxgrad.train.stateful import StatefulTrainer

        module = torch_module(args, dataset)
        example = torch.from_numpy(dataset.x_train[: args.batch_size])
        # every batch size from one capture where export is needed (evaluation's last batch)
        self.model, params, buffers = nn.from_torch(
            module,
            example,
            with_buffers=True,
            dynamic_shapes="batch",
            capture=getattr(args, "capture", "auto"),
        )
        options, self.devices = trainer_options(args, dataset)
        self.trainer = StatefulTrainer(
            self.model,
            losses.cross_entropy,
            jax_optimizer(args, dataset),
            params,
            buffers,
            strategy=args.strategy,
            **options,
        )

    def evaluate(self, x, y) -> dict:
        return self.trainer.evaluate(x, y)

    def params_numpy(self) -> dict:
        return self.trainer.state_dict_numpy()


class TorchRun(_Run):
    framework = "torch"

    def __init__(self, args, dataset, sizes, params=None):
        import torch

        import torchref
        from torchref import train as ttrain
        from torchref.optim import make_optimizer

        torch.manual_seed(args.seed)
        if module_model(args):
            self.module = torch_module(args, dataset)
        elif args.hidden is None:
            from torchref.sequence_models import sequence_model

            self.module = sequence_model(args.model, seed=args.seed)
        else:
            self.module = torchref.mlp(sizes, args.activation)
        if args.precision == "float64" and not module_model(args):
            self.module = self.module.double()
        if params is not None:
            torchref.load_numpy(self.module, params)
        self.device = args.device
        optimizer = make_optimizer(
            args.optimizer, self.module.parameters(), **optimizer_kwargs(args)
        )
        if args.scheduler:
            from torchref import schedulers

            name, given = args.scheduler
            kwargs = schedulers.scheduler_kwargs(name, args.lr, total_steps(args, dataset), **given)
            optimizer = schedulers.SteppedOptimizer(
                optimizer, schedulers.make_scheduler(name, optimizer, **kwargs)
            )
        self.trainer = ttrain.TorchTrainer(
            self.module,
            optimizer,
            batch_size=args.batch_size,
            seed=args.seed,
            drop_last=not args.keep_last_batch,
            accumulate=args.accumulate,
            clip=args.clip,
            compile=args.compile,
            device=args.device,
            autocast_dtype=torch.bfloat16 if args.precision == "bfloat16" else None,
            checkpoint_dir=checkpoint_dir(args, "torch"),
            checkpoint_every=args.checkpoint_every,
            config=run_config(args, dataset),
        )
        if args.precision == "bfloat16":  # a kernel without a bf16 form: refused before training
            try:
                ttrain.check_autocast(self.trainer.module, dataset.x_train[:2])
            except ValueError as exc:
                raise ValueError(
                    f"--precision bfloat16 --model {args.model}: {exc}; use "
                    "--precision float32, or --framework jax"
                ) from None
        self.devices = f"torch {self.trainer.device} ({torch.get_num_threads()} threads)"
        self._evaluate = ttrain.evaluate

    def evaluate(self, x, y) -> dict:
        return self._evaluate(self.module, x, y, device=self.device)

    def params_numpy(self) -> dict:
        return self.trainer.state_dict_numpy()


def drift(reference: dict, candidate: dict) -> tuple[float, float]:
    """Max |Δ| over all parameters, and that relative to max |reference|."""
    abs_err = max(float(np.max(np.abs(reference[k] - candidate[k]))) for k in reference)
    scale = max(float(np.max(np.abs(v))) for v in reference.values() if v.dtype.kind == "f")
    return abs_err, abs_err / scale


TABLE_HEADER = (
    f"{'epoch':>5}  {'framework':<9} {'train loss':>10} {'test loss':>9} "
    f"{'test acc':>8} {'seconds':>7} {'ex/s':>9}"
)


def table_row(r: dict) -> str:
    return (
        f"{r['epoch']:>5}  {r['framework']:<9} {r['train_loss']:>10.4f} {r['test_loss']:>9.4f} "
        f"{100 * r['test_accuracy']:>7.2f}% {r['seconds']:>7.2f} {r['examples_per_s']:>9,.0f}"
    )


def plot(path: str, history: dict, rows: list[dict], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401  (MaxNLocator)

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.8))
    for framework, losses in history.items():
        steps = np.arange(1, len(losses) + 1)
        ax_loss.plot(steps, losses, lw=0.6, alpha=0.35)
        window = max(1, len(losses) // 50)
        smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
        ax_loss.plot(
            steps[window - 1 :],
            smooth,
            lw=1.6,
            label=f"{framework} (moving mean)",
            color=ax_loss.lines[-1].get_color(),
        )
        mine = [r for r in rows if r["framework"] == framework]
        ax_acc.plot(
            [r["epoch"] for r in mine],
            [100 * r["test_accuracy"] for r in mine],
            marker="o",
            ms=3,
            label=framework,
        )
    ax_loss.set(
        xlabel="step",
        ylabel="training loss (cross-entropy)",
        yscale="log",
        title="training loss per step",
    )
    ax_acc.set(xlabel="epoch", ylabel="test accuracy (%)", title="test accuracy per epoch")
    ax_acc.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = build_parser()
    args = parse_args(argv, parser)
    try:
        return train(args)
    except KeyboardInterrupt:  # a second Ctrl-C, or one before training began
        kept = [
            d
            for d in map(lambda f: checkpoint_dir(args, f), frameworks(args))
            if d and os.path.isfile(os.path.join(d, "LATEST"))
        ]
        print(
            "interrupted (SIGINT) before a final checkpoint could be written; "
            + (
                f"the checkpoints already in {', '.join(kept)} are kept: resume with "
                f"{resume_command(args)}"
                if kept
                else "nothing can be resumed"
            ),
            file=sys.stderr,
        )
        return 130


def _error(message) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def join_processes(args) -> tuple[str | None, bool]:
    """Join ``jax.distributed`` when the environment describes several processes.

    With ``JAX_COORDINATOR_ADDRESS`` (and ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``) set,
    every process runs this script; the global batch is split over all devices of all
    processes, the parameters replicated (``--shard data``) or split (``--shard fsdp``).
    What does not work across processes yet, or with ``--shard``, is refused here,
    before anything is trained.

    Returns:
      ``(error, primary)``: the refusal's one line (or None), and whether this process
      writes ``--save``, ``--plot``, ``--json`` and the log (process 0; the only process
      of a single-host run). The other processes print errors only.
    """
    from jaxgrad.train import initialize_distributed

    if not initialize_distributed():
        return None, True
    import jax

    count = jax.process_count()
    for given, refusal in (
        (
            args.framework != "jax",
            f"--framework {args.framework}: torch's loop runs in one process; with "
            f"{count} processes train jax alone (--framework jax)",
        ),
        (
            args.shard == "none",
            f"--shard none trains on one device; with {count} processes use --shard data, fsdp or tensor",
        ),
    ):
        if given:
            return refusal, jax.process_index() == 0
    if jax.process_index() != 0:  # the log is process 0's; errors still reach stderr
        sys.stdout.flush()  # for the rest of the process, the runtime's own lines too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return None, jax.process_index() == 0


def distributed_record(runs) -> dict:
    """``--json``'s device fields for the jax run: devices and processes, the sharding,
    and the parameter bytes in all and on the fullest device."""
    run = next((r for r in runs if r.framework == "jax"), None)
    params = getattr(getattr(run, "trainer", None), "params", None)
    if params is None:
        return {}
    import jax

    from jaxgrad.train import param_bytes

    total, per_device = param_bytes(params)
    return {
        "devices": jax.device_count(),
        "processes": jax.process_count(),
        "shard": getattr(run.trainer, "shard", "data"),
        "param_bytes": total,
        "param_bytes_per_device": per_device,
    }


def train(args) -> int:
    """The run itself, after the arguments were validated: returns the exit status."""
    from jaxgrad import data
    from jaxgrad.train import check_batch, save_params

    refusal, primary = join_processes(args)
    if refusal:
        return _error(refusal)
    if args.precision == "float64":
        if args.hidden is None:
            return _error(
                f"--precision float64 --model {args.model}: float64 trains the MLP preset "
                "and converted torch modules (cnn, resnet, MODULE:NAME) only so far; use "
                "--precision float32"
            )
        if args.framework != "torch":
            import jax

            jax.config.update("jax_enable_x64", True)  # before any jax array is made
    try:
        dataset = load_data(args, primary)
        check_batch(args.batch_size, args.accumulate, 1, len(dataset.x_train))
    except (OSError, ValueError) as exc:
        return _error(exc)
    if args.scheduler:  # checked again at the run's own length, still before any training
        try:
            check_scheduler(*args.scheduler, lr=args.lr, total_steps=total_steps(args, dataset))
        except (TypeError, ValueError) as exc:
            return _error(f"--scheduler {args.scheduler[0]}: {exc}")
    if args.keep_last_batch and module_model(args) and len(dataset.x_train) % args.batch_size == 1:
        return _error(
            f"--keep-last-batch: the last batch of {len(dataset.x_train)} examples would hold "
            f"one example, which torch's BatchNorm refuses to train on and a converted "
            f"model's capture does not take; use another --batch-size"
        )
    if dataset.x_train.dtype.kind != "f" and not module_model(args):
        return _error(
            f"--data-dir {args.data_dir}: token ids ({dataset.name}) train a sequence "
            f"classifier given as --model MODULE:NAME; --model {args.model} takes images"
        )
    if not module_model(args) and dataset.x_train.ndim > 2:  # an MLP: flat features
        dataset = dataclasses.replace(
            dataset,
            x_train=dataset.x_train.reshape(len(dataset.x_train), -1),
            x_test=dataset.x_test.reshape(len(dataset.x_test), -1),
        )
    if args.model == "transformer":
        dataset = data.digit_tokens(dataset)  # intensities 0…16 as Embedding ids
    elif args.standardize and dataset.x_train.dtype.kind == "f":  # not token ids
        dataset = standardized(dataset)
    if args.precision == "float64" and dataset.x_train.dtype.kind == "f":
        # both frameworks read the same float64 images
        dataset = dataclasses.replace(
            dataset,
            x_train=dataset.x_train.astype(np.float64),
            x_test=dataset.x_test.astype(np.float64),
        )
    sizes = [dataset.num_features, *(args.hidden or ()), dataset.num_classes]
    described = args.model if args.hidden is None else f"mlp {sizes} {args.activation}"
    if module_model(args):
        if dataset.x_train.dtype.kind == "f":  # images `(n, C, H, W)`, as torch reads them
            nchw = lambda x: x.reshape(len(x), -1, *dataset.image_shape[-2:])  # noqa: E731
            dataset = dataclasses.replace(
                dataset, x_train=nchw(dataset.x_train), x_test=nchw(dataset.x_test)
            )
        described = args.model
    print(
        f"data: {dataset.name}, {len(dataset.x_train)} train / {len(dataset.x_test)} test, "
        f"model: {described}, {args.optimizer} {optimizer_kwargs(args)}, "
        f"batch {args.batch_size}×{args.accumulate}, {args.precision}"
    )
    print(f"host memory: {_cli.apply_keep_host_memory(args)}")
    try:
        runs = []
        if args.framework in ("jax", "both"):
            runs.append((JaxModuleRun if module_model(args) else JaxRun)(args, dataset, sizes))
        if args.framework in ("torch", "both"):
            shared = runs[0].params_numpy() if runs else None  # same initial weights
            runs.append(TorchRun(args, dataset, sizes, shared))
        for run in runs if args.resume else ():
            path = (
                os.path.join(checkpoint_dir(args, run.framework), args.resume_from)
                if args.resume_from
                else None
            )
            meta = run.trainer.resume(path)
            print(
                f"{run.framework} resumed from step {meta['global_step']} "
                f"(epoch {meta['epoch'] + 1}, batch {meta['step_in_epoch']})"
            )
    except ValueError as exc:  # CheckpointError is a ValueError, in both frameworks
        intact = getattr(exc, "intact", None)
        if intact:
            exc = f"{exc} To resume from it: {resume_command(args, os.path.basename(intact))}"
        return _error(exc)
    for run in runs:
        print(f"{run.framework} devices: {run.devices}")
        if hasattr(run.trainer, "choose_strategy"):  # jax: "auto" probes (or reads its cache)
            try:  # also where the epoch's batches are first cut: a last batch that cannot be
                choice = run.trainer.choose_strategy(dataset.x_train, dataset.y_train)
            except ValueError as exc:
                return _error(exc)
            print(f"{run.framework} strategy: {choice.describe()}", flush=True)

    step_examples = args.batch_size * args.accumulate
    epoch_steps = steps_per_epoch(args, dataset)
    history = {run.framework: [] for run in runs}
    rows, drifts = [], []
    began = time.perf_counter()
    with _cli.StopOnSignal(run.trainer for run in runs) as stop:
        print(TABLE_HEADER)  # from here on a signal stops cleanly
        print("-" * len(TABLE_HEADER), flush=True)
        for epoch in range(min(run.epoch for run in runs), args.epochs):
            for run in runs:
                if run.epoch != epoch or stop.signum is not None:  # resumed past it / stopping
                    continue
                resumed_at = getattr(run.trainer, "step_in_epoch", 0)
                progress = Progress(
                    not args.no_progress and primary,  # process 0's alone (issue 55)
                    run.framework,
                    epoch,
                    epoch_steps,
                    step_examples,
                    initial=resumed_at,
                )

                def on_steps(global_step, losses, progress=progress):
                    progress.update(losses)
                    if args.debug_kill_at_step and global_step >= args.debug_kill_at_step:
                        os.kill(os.getpid(), signal.SIGKILL)

                try:
                    result = run.train_epoch(dataset.x_train, dataset.y_train, on_steps)
                except FloatingPointError as exc:  # NonFiniteLossError, either framework
                    progress.close()
                    print(f"error: {exc}", file=sys.stderr)
                    return 3
                progress.close()
                history[run.framework].extend(result.losses.tolist())
                if result.stopped:
                    continue
                test = run.evaluate(dataset.x_test, dataset.y_test)
                rows.append(
                    {
                        "epoch": epoch + 1,
                        "framework": run.framework,
                        "train_loss": result.mean_loss,
                        "test_loss": test["loss"],
                        "test_accuracy": test["accuracy"],
                        "seconds": result.seconds,
                        "examples_per_s": result.examples / max(result.seconds, 1e-9),
                    }
                )
                print(table_row(rows[-1]), flush=True)
            if stop.signum is not None:
                break
            if len(runs) == 2 and len({run.trainer.global_step for run in runs}) == 1:
                abs_err, rel_err = drift(runs[1].params_numpy(), runs[0].params_numpy())
                drifts.append({"epoch": epoch + 1, "max_abs": abs_err, "max_rel": rel_err})
        if stop.signum is not None:
            return stopped(args, runs, stop)
    total = time.perf_counter() - began
    for run in runs if args.checkpoint_dir else ():
        print(f"{run.framework} final checkpoint: {run.trainer.save()}")
    if drifts:
        print("\ndrift of jax from torch (same initial weights, same batches):")
        if getattr(args, "draws_randomness", False):
            print(
                f"  (--model {args.model} draws random numbers in training, e.g. dropout: "
                "each framework draws its own masks, so this drift is no parity verdict; "
                "build it without them to prove the training)"
            )
        for d in drifts:
            print(
                f"  after epoch {d['epoch']:>3}: max |Δparam| = {d['max_abs']:.3e} "
                f"({d['max_rel']:.2e} of max |param|)"
            )
        losses_j, losses_t = np.array(history["jax"]), np.array(history["torch"])
        common = min(len(losses_j), len(losses_t))  # after a resume: the steps both ran
        if common:
            print(
                f"  max |Δ train loss| over the last {common} steps: "
                f"{np.max(np.abs(losses_j[-common:] - losses_t[-common:])):.3e}"
            )
    print(
        f"\ntraining time: {total:.1f} s for {len({r['epoch'] for r in rows})} epochs "
        f"(including compilation and evaluation)"
    )
    for run in runs if args.save else ():
        state = run.params_numpy()  # every process: gathering sharded params is collective
        if primary:
            path = args.save if run is runs[0] else _suffixed(args.save, run.framework)
            save_params(
                path, state, metadata={"framework": run.framework, "sizes": json.dumps(sizes)}
            )
            print(f"saved {run.framework} parameters to {path}")
    if args.plot and primary:
        plot(
            args.plot,
            history,
            rows,
            f"{described} on {dataset.name}, "
            f"{args.optimizer} {optimizer_kwargs(args)}, batch {step_examples}",
        )
        print(f"loss curve: {args.plot}")
    if args.json and primary:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "args": {k: v for k, v in vars(args).items() if k not in ("hidden", "argv")},
                    "epochs": rows,
                    "drift": drifts,
                    "losses": history,
                    "seconds": total,
                    **distributed_record(runs),
                },
                handle,
                indent=1,
                default=list,
            )
    for run in runs:
        accuracy = run.evaluate(dataset.x_test, dataset.y_test)["accuracy"]
        print(f"{run.framework} test accuracy: {100 * accuracy:.1f}%")
    return 0


def stopped(args, runs, stop) -> int:
    """After SIGINT/SIGTERM: the final checkpoints and how to resume; the exit status."""
    print(f"\n{stop.name} received: stopped after the step that was running", flush=True)
    for run in runs:
        trainer = run.trainer
        where = (
            f"step {trainer.global_step} (epoch {trainer.epoch + 1}, batch {trainer.step_in_epoch})"
        )
        if args.checkpoint_dir:
            print(f"{run.framework} checkpoint: {trainer.save()} at {where}")
        else:
            print(f"{run.framework} stopped at {where}")
    if args.checkpoint_dir:
        print(f"resume with: {resume_command(args)}")
    else:
        print("no --checkpoint-dir was given: nothing was saved and this run cannot be resumed")
    return stop.exit_status


def load_data(args, primary: bool = True):
    """The training data: the digits, or what ``--data-dir`` holds (an IDX directory, an
    image folder, read with a progress bar, or a token .npz: ``jaxgrad.data.load_dataset``)."""
    from jaxgrad import data

    if not args.data_dir:
        return data.load_digits()
    return data.load_dataset(
        data_dir=args.data_dir,
        image_size=args.image_size,
        progress=not args.no_progress and primary,
    )


def standardized(dataset):
    """The dataset with each feature shifted and scaled by the training set's mean/std."""
    import dataclasses

    mean = dataset.x_train.mean(axis=0)
    std = dataset.x_train.std(axis=0)
    std = np.where(std > 0, std, 1.0)  # constant pixels (digits' borders) stay 0
    scale = lambda x: ((x - mean) / std).astype(dataset.x_train.dtype)  # noqa: E731
    return dataclasses.replace(
        dataset, x_train=scale(dataset.x_train), x_test=scale(dataset.x_test)
    )


def _suffixed(path: str, framework: str) -> str:
    stem, ext = os.path.splitext(path)
    return f"{stem}.{framework}{ext or '.safetensors'}"


if __name__ == "__main__":
    sys.exit(main())
