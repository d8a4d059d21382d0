#!/usr/bin/env python
"""Train an MLP with jaxgrad (jit-compiled), PyTorch (imperative loop), or both side by side.

Trains on scikit-learn's 8×8 digits by default (no download), or on FashionMNIST
from the IDX files in --data-dir. Prints the devices used, a progress bar per
epoch (loss, examples/s), a per-epoch table of train loss, test loss and test
accuracy, and ends with one line per framework: `jax test accuracy: 97.9%`.

With --framework both, the two frameworks start from the same weights (jaxgrad's
initialisation, copied into torch) and see the same batches in the same order; the
script reports after every epoch how far their parameters and losses have drifted.

Checkpoints: --checkpoint-dir DIR --checkpoint-every N writes params (safetensors,
torch state_dict keys), optimizer state, step, data position and seed atomically
every N steps (both frameworks: DIR/jax and DIR/torch); --resume continues
bit-exactly from the latest.
A NaN/inf loss stops the run naming the step and the first parameter whose
gradient is not finite (exit status 3); the last good checkpoint is kept.

Examples:
  python scripts/train.py                                   # digits, jax, ~97-98 %
  python scripts/train.py --framework both --plot loss.png
  python scripts/train.py --model 512,256 --optimizer sgd --lr 0.05 --momentum 0.9
  python scripts/train.py --checkpoint-dir ckpt --checkpoint-every 50
  python scripts/train.py --checkpoint-dir ckpt --checkpoint-every 50 --resume
  python scripts/train.py --data-dir ~/data/fashion-mnist --epochs 5 --batch-size 128
  python scripts/train.py --model transformer --optimizer adam --framework both

Exit status: 0 done, 2 bad arguments / checkpoint problems, 3 non-finite loss.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import numpy as np

MODELS = {  # hidden widths; the input and output widths come from the data
    "small": (128,),
    "medium": (256, 128),
    "large": (512, 256),
    "lesson": (256,),  # the lessons' 784-256-10 network on FashionMNIST
}
# sequence classifiers of the digits (torchref.sequence_models; jaxgrad twins by from_torch):
# 8 rows of 8 pixels through an LSTM / GRU, or the 64 intensities as Embedding tokens
SEQUENCE_MODELS = ("transformer", "lstm", "gru")
OPTIMIZER_DEFAULT_LR = {"sgd": 0.05, "adam": 1e-3, "adamw": 1e-3, "rmsprop": 1e-3}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = parser.add_argument_group("data and model")
    data.add_argument("--data-dir", help="FashionMNIST IDX directory (default: digits)")
    data.add_argument("--model", default="medium",
                      help=f"hidden widths: a preset ({', '.join(f'{k}={list(v)}' for k, v in MODELS.items())}) "
                           "or a comma list such as 256,128 (default: medium); or a sequence "
                           f"model of the digits: {', '.join(SEQUENCE_MODELS)}")
    data.add_argument("--standardize", action=argparse.BooleanOptionalAction, default=True,
                      help="scale each input feature to zero mean, unit variance with the "
                           "training set's statistics (default: on)")
    data.add_argument("--activation", default="relu",
                      choices=["relu", "tanh", "sigmoid", "gelu", "leaky_relu"])
    opt = parser.add_argument_group("optimisation")
    opt.add_argument("--optimizer", default="sgd", choices=sorted(OPTIMIZER_DEFAULT_LR))
    opt.add_argument("--lr", type=float, help="learning rate (default: 0.05 sgd, 1e-3 others)")
    opt.add_argument("--momentum", type=float, default=0.9,
                     help="sgd / rmsprop momentum (default: 0.9)")
    opt.add_argument("--weight-decay", type=float, default=None,
                     help="torch semantics: L2 for sgd/adam/rmsprop, decoupled for adamw")
    opt.add_argument("--epochs", type=int, default=20)
    opt.add_argument("--batch-size", type=int, default=32, help="examples per micro-batch")
    opt.add_argument("--accumulate", type=int, default=1, metavar="K",
                     help="micro-batches per optimizer step (step = K × batch-size examples)")
    opt.add_argument("--clip", type=float, help="clip the gradient's total 2-norm (clip_grad_norm_)")
    opt.add_argument("--precision", default="float32", choices=["float32", "bfloat16"],
                     help="bfloat16: bf16 compute, float32 master weights and optimizer")
    opt.add_argument("--seed", type=int, default=0, help="initialisation and data-order seed")
    run = parser.add_argument_group("frameworks and devices")
    run.add_argument("--framework", default="jax", choices=["jax", "torch", "both"])
    run.add_argument("--device", default="cpu", choices=["cpu", "gpu", "tpu"],
                     help="jax: data-parallel over every device of this kind; torch: cpu/cuda")
    run.add_argument("--fused", action="store_true",
                     help="jax: run each stretch of steps as one lax.scan call")
    run.add_argument("--compile", action="store_true", help="torch: torch.compile the model")
    out = parser.add_argument_group("checkpoints and output")
    out.add_argument("--checkpoint-dir", help="write checkpoints here (with --framework both: "
                     "DIR/jax and DIR/torch)")
    out.add_argument("--checkpoint-every", type=int, metavar="N", help="steps between checkpoints")
    out.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    out.add_argument("--save", metavar="PATH", help="final params as safetensors (torch keys)")
    out.add_argument("--plot", metavar="PATH", help="loss-curve PNG")
    out.add_argument("--json", metavar="PATH", help="history as JSON")
    out.add_argument("--no-progress", action="store_true", help="no progress bars")
    # Fault injection for the resume test: SIGKILL this process after global step N.
    out.add_argument("--debug-kill-at-step", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        args.hidden = None if args.model in SEQUENCE_MODELS else (
            MODELS.get(args.model) or tuple(int(w) for w in args.model.split(",")))
    except ValueError:
        parser.error(f"--model {args.model!r}: a preset ({', '.join(MODELS)}) or widths like 256,128")
    for name in ("epochs", "batch_size", "accumulate"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})")
    if args.lr is None:
        args.lr = OPTIMIZER_DEFAULT_LR[args.optimizer]
    if args.resume and not args.checkpoint_dir:
        parser.error("--resume needs --checkpoint-dir")
    if args.checkpoint_every and not args.checkpoint_dir:
        parser.error("--checkpoint-every needs --checkpoint-dir")
    return args


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


def run_config(args, dataset) -> dict:
    """What a checkpoint must agree with to be resumed (not the epoch count)."""
    return {
        "dataset": dataset.name, "hidden": list(args.hidden or [args.model]),
        "activation": args.activation,
        "optimizer": args.optimizer, "optimizer_kwargs": optimizer_kwargs(args),
        "batch_size": args.batch_size, "accumulate": args.accumulate, "clip": args.clip,
        "precision": args.precision, "seed": args.seed, "fused": args.fused,
    }


class Progress:
    """A tqdm bar per epoch showing loss and examples/s (silent with --no-progress)."""

    def __init__(self, enabled: bool, framework: str, epoch: int, total: int, step_examples: int,
                 initial: int = 0):
        self.bar = None
        self.began = time.perf_counter()
        self.step_examples, self.done = step_examples, 0
        if enabled:
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=initial, desc=f"{framework:>5} epoch {epoch + 1}",
                            unit="step", leave=False, file=sys.stderr, dynamic_ncols=True)

    def update(self, losses: np.ndarray) -> None:
        self.done += len(losses)
        if self.bar is not None:
            rate = self.done * self.step_examples / max(time.perf_counter() - self.began, 1e-9)
            self.bar.set_postfix(loss=f"{float(losses[-1]):.4f}", ex_s=f"{rate:,.0f}", refresh=False)
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
        from jaxgrad import losses, nn, optim

        if args.framework == "both" and args.device != "cpu":
            # torch's float32 matmuls are full float32; jax's GPU default is TF32
            jax.config.update("jax_default_matmul_precision", "float32")
        jtrain.initialize_distributed()
        devices = jtrain.select_devices(args.device)
        if args.hidden is None:  # a sequence model: the twin of torch's, same weights
            from torchref.sequence_models import sequence_model

            self.model, initial = nn.from_torch(sequence_model(args.model, seed=args.seed))
            params = initial if params is None else params
        else:
            self.model = nn.mlp(sizes, args.activation)
        if params is None:
            params = self.model.init(jax.random.key(args.seed))
        optimizer = jtrain.build_optimizer(
            getattr(optim, args.optimizer)(**optimizer_kwargs(args)), clip=args.clip)
        self.compute_dtype = "bfloat16" if args.precision == "bfloat16" else None
        self.loss_fn = losses.cross_entropy
        self.trainer = jtrain.Trainer(
            self.model, self.loss_fn, optimizer, params, batch_size=args.batch_size,
            seed=args.seed, accumulate=args.accumulate, compute_dtype=self.compute_dtype,
            fused=args.fused, devices=devices, checkpoint_dir=checkpoint_dir(args, "jax"),
            checkpoint_every=args.checkpoint_every, config=run_config(args, dataset))
        self.devices = jtrain.sharding.describe_devices(devices)
        self._evaluate = jtrain.evaluate

    def evaluate(self, x, y) -> dict:
        return self._evaluate(self.model, self.trainer.params, x, y, loss_fn=self.loss_fn,
                              compute_dtype=self.compute_dtype)

    def params_numpy(self) -> dict:
        return self.model.state_dict(self.trainer.params)


class TorchRun(_Run):
    framework = "torch"

    def __init__(self, args, dataset, sizes, params=None):
        import torch
        import torchref
        from torchref import train as ttrain
        from torchref.optim import make_optimizer

        torch.manual_seed(args.seed)
        if args.hidden is None:
            from torchref.sequence_models import sequence_model

            self.module = sequence_model(args.model, seed=args.seed)
        else:
            self.module = torchref.mlp(sizes, args.activation)
        if params is not None:
            torchref.load_numpy(self.module, params)
        self.device = args.device
        optimizer = make_optimizer(args.optimizer, self.module.parameters(),
                                   **optimizer_kwargs(args))
        self.trainer = ttrain.TorchTrainer(
            self.module, optimizer, batch_size=args.batch_size, seed=args.seed,
            accumulate=args.accumulate, clip=args.clip, compile=args.compile, device=args.device,
            autocast_dtype=torch.bfloat16 if args.precision == "bfloat16" else None,
            checkpoint_dir=checkpoint_dir(args, "torch"), checkpoint_every=args.checkpoint_every,
            config=run_config(args, dataset))
        self.devices = f"torch {self.trainer.device} ({torch.get_num_threads()} threads)"
        self._evaluate = ttrain.evaluate

    def evaluate(self, x, y) -> dict:
        return self._evaluate(self.module, x, y, device=self.device)

    def params_numpy(self) -> dict:
        return self.trainer.state_dict_numpy()


def drift(reference: dict, candidate: dict) -> tuple[float, float]:
    """Max |Δ| over all parameters, and that relative to max |reference|."""
    abs_err = max(float(np.max(np.abs(reference[k] - candidate[k]))) for k in reference)
    scale = max(float(np.max(np.abs(v))) for v in reference.values())
    return abs_err, abs_err / scale


TABLE_HEADER = (f"{'epoch':>5}  {'framework':<9} {'train loss':>10} {'test loss':>9} "
                f"{'test acc':>8} {'seconds':>7} {'ex/s':>9}")


def table_row(r: dict) -> str:
    return (f"{r['epoch']:>5}  {r['framework']:<9} {r['train_loss']:>10.4f} {r['test_loss']:>9.4f} "
            f"{100 * r['test_accuracy']:>7.2f}% {r['seconds']:>7.2f} {r['examples_per_s']:>9,.0f}")


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
        ax_loss.plot(steps[window - 1:], smooth, lw=1.6, label=f"{framework} (moving mean)",
                     color=ax_loss.lines[-1].get_color())
        mine = [r for r in rows if r["framework"] == framework]
        ax_acc.plot([r["epoch"] for r in mine], [100 * r["test_accuracy"] for r in mine],
                    marker="o", ms=3, label=framework)
    ax_loss.set(xlabel="step", ylabel="training loss (cross-entropy)", yscale="log",
                title="training loss per step")
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
    args = parse_args(argv)
    from jaxgrad import data
    from jaxgrad.train import save_params

    try:
        dataset = (data.load_fashion_mnist(args.data_dir) if args.data_dir else data.load_digits())
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.model == "transformer":
        dataset = data.digit_tokens(dataset)  # intensities 0…16 as Embedding ids
    elif args.standardize:
        dataset = standardized(dataset)
    sizes = [dataset.num_features, *(args.hidden or ()), dataset.num_classes]
    described = args.model if args.hidden is None else f"mlp {sizes} {args.activation}"
    print(f"data: {dataset.name}, {len(dataset.x_train)} train / {len(dataset.x_test)} test, "
          f"model: {described}, {args.optimizer} {optimizer_kwargs(args)}, "
          f"batch {args.batch_size}×{args.accumulate}, {args.precision}")
    try:
        runs = []
        if args.framework in ("jax", "both"):
            runs.append(JaxRun(args, dataset, sizes))
        if args.framework in ("torch", "both"):
            shared = runs[0].params_numpy() if runs else None  # same initial weights
            runs.append(TorchRun(args, dataset, sizes, shared))
        for run in runs if args.resume else ():
            meta = run.trainer.resume()
            print(f"{run.framework} resumed from step {meta['global_step']} "
                  f"(epoch {meta['epoch'] + 1}, batch {meta['step_in_epoch']})")
    except ValueError as exc:  # CheckpointError is a ValueError, in both frameworks
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for run in runs:
        print(f"{run.framework} devices: {run.devices}")

    step_examples = args.batch_size * args.accumulate
    steps_per_epoch = len(dataset.x_train) // step_examples
    history = {run.framework: [] for run in runs}
    rows, drifts = [], []
    print(TABLE_HEADER)
    print("-" * len(TABLE_HEADER))
    began = time.perf_counter()
    for epoch in range(min(run.epoch for run in runs), args.epochs):
        for run in runs:
            if run.epoch != epoch:  # resumed past this epoch already
                continue
            resumed_at = getattr(run.trainer, "step_in_epoch", 0)
            progress = Progress(not args.no_progress, run.framework, epoch, steps_per_epoch,
                                step_examples, initial=resumed_at)

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
            test = run.evaluate(dataset.x_test, dataset.y_test)
            rows.append({"epoch": epoch + 1, "framework": run.framework,
                         "train_loss": result.mean_loss, "test_loss": test["loss"],
                         "test_accuracy": test["accuracy"], "seconds": result.seconds,
                         "examples_per_s": result.examples / max(result.seconds, 1e-9)})
            print(table_row(rows[-1]), flush=True)
        if len(runs) == 2 and len({run.trainer.global_step for run in runs}) == 1:
            abs_err, rel_err = drift(runs[1].params_numpy(), runs[0].params_numpy())
            drifts.append({"epoch": epoch + 1, "max_abs": abs_err, "max_rel": rel_err})
    total = time.perf_counter() - began
    for run in runs if args.checkpoint_dir else ():
        print(f"{run.framework} final checkpoint: {run.trainer.save()}")
    if drifts:
        print("\ndrift of jax from torch (same initial weights, same batches):")
        for d in drifts:
            print(f"  after epoch {d['epoch']:>3}: max |Δparam| = {d['max_abs']:.3e} "
                  f"({d['max_rel']:.2e} of max |param|)")
        losses_j, losses_t = np.array(history["jax"]), np.array(history["torch"])
        common = min(len(losses_j), len(losses_t))  # after a resume: the steps both ran
        if common:
            print(f"  max |Δ train loss| over the last {common} steps: "
                  f"{np.max(np.abs(losses_j[-common:] - losses_t[-common:])):.3e}")
    print(f"\ntraining time: {total:.1f} s for {len({r['epoch'] for r in rows})} epochs "
          f"(including compilation and evaluation)")
    if args.save:
        for run in runs:
            path = args.save if run is runs[0] else _suffixed(args.save, run.framework)
            save_params(path, run.params_numpy(),
                        metadata={"framework": run.framework, "sizes": json.dumps(sizes)})
            print(f"saved {run.framework} parameters to {path}")
    if args.plot:
        plot(args.plot, history, rows, f"{described} on {dataset.name}, "
             f"{args.optimizer} {optimizer_kwargs(args)}, batch {step_examples}")
        print(f"loss curve: {args.plot}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": {k: v for k, v in vars(args).items() if k != "hidden"},
                       "epochs": rows, "drift": drifts, "losses": history,
                       "seconds": total}, handle, indent=1, default=list)
    for run in runs:
        accuracy = run.evaluate(dataset.x_test, dataset.y_test)["accuracy"]
        print(f"{run.framework} test accuracy: {100 * accuracy:.1f}%")
    return 0


def standardized(dataset):
    """The dataset with each feature shifted and scaled by the training set's mean/std."""
    import dataclasses

    mean = dataset.x_train.mean(axis=0)
    std = dataset.x_train.std(axis=0)
    std = np.where(std > 0, std, 1.0)  # constant pixels (digits' borders) stay 0
    scale = lambda x: ((x - mean) / std).astype(dataset.x_train.dtype)  # noqa: E731
    return dataclasses.replace(dataset, x_train=scale(dataset.x_train), x_test=scale(dataset.x_test))


def _suffixed(path: str, framework: str) -> str:
    stem, ext = os.path.splitext(path)
    return f"{stem}.{framework}{ext or '.safetensors'}"


if __name__ == "__main__":
    sys.exit(main())
