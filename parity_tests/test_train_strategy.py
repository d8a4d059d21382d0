"""jaxgrad.train.strategy: the execution strategy a trainer runs, chosen or forced.

The cost model, the choice and the cache are checked on injected timings (worked by
hand below, nothing timed); the trainers run every strategy on a tiny MLP and must end
with the same parameters (float32 tier, as ``test_train.test_fused_epoch_equals_step_loop``
holds the fused epoch to the step loop).
"""

import itertools
import json
import os

import jax
import numpy as np
import pytest

from jaxgrad import losses, nn, optim
from jaxgrad.parity import assert_parity
from jaxgrad.train import Trainer
from jaxgrad.train import strategy as st
from jaxgrad.train.stateful import StatefulTrainer


# ------------------------------------------------------------------ strings and candidates
@pytest.mark.parametrize(
    "value, expected",
    [
        ("auto", "auto"),
        ("step", "step"),
        ("EPOCH", "epoch"),
        ("unroll:4", "unroll:4"),
        ("unroll:08", "unroll:8"),
        ("unrolled", "unrolled"),
    ],
)
def test_parse_strategy(value, expected):
    assert st.parse_strategy(value) == expected


@pytest.mark.parametrize("value", ["fast", "unroll", "unroll:1", "unroll:0", "unroll:x", 4, None])
def test_parse_strategy_rejects_naming_the_argument(value):
    with pytest.raises(ValueError, match=r"`strategy` \(="):
        st.parse_strategy(value)
    with pytest.raises(ValueError, match="`--strategy`"):
        st.parse_strategy(value, "--strategy")


def test_scan_unroll():
    assert (st.scan_unroll("epoch"), st.scan_unroll("unroll:4"), st.scan_unroll("unrolled")) == (
        1,
        4,
        True,
    )
    with pytest.raises(ValueError, match="no scan"):
        st.scan_unroll("step")


def test_candidates():
    assert st.candidates(1) == ["step"]
    assert st.candidates(3) == ["step", "epoch", "unrolled"]  # no unroll:4 in a 3-step call
    assert st.candidates(44) == ["step", "epoch", "unroll:4", "unrolled"]
    assert st.candidates(st.MAX_UNROLLED_STEPS + 1) == ["step", "epoch", "unroll:4"]
    with pytest.raises(ValueError, match="`longest_call`"):
        st.candidates(0)


# ------------------------------------------------------------------------- cost model
TIMINGS = {
    "step": st.Timing(1.0, 0.010),
    "epoch": st.Timing(2.0, 0.005),
    "unroll:4": st.Timing(3.0, 0.0048),
    "unrolled": st.Timing(4.0, 0.004),
}


def test_estimates_by_hand():
    # step: 1 + 100 × 0.010 = 2.0; epoch: 2 + 0.5 = 2.5; unroll:4: 3 + 0.48 = 3.48;
    # unrolled, 50-step calls probed at 8 steps: 4 × 50/8 = 25 compile, + 0.4
    kwargs = dict(total_steps=100, call_lengths=[50], probe_steps=8)
    best, estimates = st.choose(TIMINGS, **kwargs)
    assert estimates == pytest.approx(
        {"step": 2.0, "epoch": 2.5, "unroll:4": 3.48, "unrolled": 25.4}, rel=1e-12
    )
    assert best == "step"  # a short run: compile time decides


def test_long_run_amortises_compile():
    # 10,000 steps: step 101, epoch 52, unroll:4 51, unrolled 25 + 40 = 65
    best, estimates = st.choose(TIMINGS, total_steps=10_000, call_lengths=[50], probe_steps=8)
    assert estimates["epoch"] == pytest.approx(52.0) and best == "unroll:4"
    assert estimates["unroll:4"] == pytest.approx(51.0)
    assert estimates["unrolled"] == pytest.approx(65.0)


def test_each_distinct_call_length_compiles_once():
    # checkpoint stretches of 30 and 14 steps: two compiles of the rolled scan
    e = st.estimate_seconds(
        "epoch", st.Timing(2.0, 0.0), total_steps=0, call_lengths=[30, 14, 30], probe_steps=8
    )
    assert e == 4.0
    e = st.estimate_seconds(
        "step", st.Timing(2.0, 0.0), total_steps=0, call_lengths=[30, 14], probe_steps=8
    )
    assert e == 2.0


def test_ties_go_to_the_first_candidate():
    same = {"step": st.Timing(1.0, 0.01), "epoch": st.Timing(1.0, 0.01)}
    assert st.choose(same, total_steps=10, call_lengths=[5], probe_steps=5)[0] == "step"


def test_unrolled_is_dropped_for_long_calls():
    fast_unrolled = {"step": st.Timing(1.0, 1.0), "unrolled": st.Timing(0.0, 1e-6)}
    best, estimates = st.choose(
        fast_unrolled, total_steps=10, call_lengths=[st.MAX_UNROLLED_STEPS + 1], probe_steps=8
    )
    assert best == "step" and "unrolled" not in estimates


def test_fused_calls_pay_their_call_overhead():
    # 100 steps in 50-step calls: 2 calls; epoch 2 + 0.5 + 2 × 0.25 = 3.0, step unchanged
    timing = st.Timing(2.0, 0.005, 0.25)
    assert st.estimate_seconds(
        "epoch", timing, total_steps=100, call_lengths=[50], probe_steps=8
    ) == pytest.approx(3.0)
    assert st.estimate_seconds(
        "step", timing, total_steps=100, call_lengths=[50], probe_steps=8
    ) == pytest.approx(2.5)
    # 101 steps need a third call
    assert st.estimate_seconds(
        "unroll:4", timing, total_steps=101, call_lengths=[50], probe_steps=8
    ) == pytest.approx(2.0 + 0.505 + 0.75)


def test_split_call_overhead_by_hand():
    # rolled epoch: 8-step calls 0.8 s, 50-step calls 1.5 s -> 1/60 s per step, and
    # 0.8 - 8/60 = 2/3 s per call; unroll:4's 8-step call 0.72 s -> (0.72 - 2/3) / 8
    long_name = "epoch, 50 steps per call"
    timings = {
        "step": st.Timing(1.0, 0.2),
        "epoch": st.Timing(2.0, 0.1),
        "unroll:4": st.Timing(3.0, 0.09),
        long_name: st.Timing(2.5, 0.03),
    }
    split = st.split_call_overhead(timings, probe_steps=8, long_name=long_name, long_steps=50)
    assert set(split) == {"step", "epoch", "unroll:4"}
    assert split["step"] == timings["step"]
    assert split["epoch"].call_seconds == pytest.approx(2 / 3)
    assert split["epoch"].step_seconds == pytest.approx(1 / 60)
    assert split["unroll:4"].step_seconds == pytest.approx((0.72 - 2 / 3) / 8)
    assert split["unroll:4"].call_seconds == pytest.approx(2 / 3)
    assert split["unroll:4"].compile_seconds == 3.0
    # a longer call no slower than the short one: all of the short call is overhead;
    # never a negative per-step time
    flat = st.split_call_overhead(
        {**timings, long_name: st.Timing(2.5, 0.8 / 50)},
        probe_steps=8,
        long_name=long_name,
        long_steps=50,
    )
    assert flat["epoch"].call_seconds == pytest.approx(0.8)
    assert flat["epoch"].step_seconds == 0.0 and flat["unroll:4"].step_seconds == 0.0


def test_overhead_steps():
    assert st.overhead_steps([50], 8) == 50
    assert st.overhead_steps([14, 1000], 8) == st.OVERHEAD_STEPS
    assert st.overhead_steps([8], 8) is None and st.overhead_steps([5], 5) is None
    # two close lengths would make the slope mostly noise: not below twice the probe's
    assert st.overhead_steps([15], 8) is None and st.overhead_steps([16], 8) == 16


def fake_clock(call_seconds):
    """Successive (start, stop) readings ``call_seconds`` apart."""
    ticks = itertools.accumulate(itertools.chain.from_iterable((0.0, t) for t in call_seconds))
    return lambda: next(ticks)


def test_probe_counts_compile_as_first_call_minus_fastest_warm_call():
    calls = []
    runners = {"step": lambda: calls.append("step"), "epoch": lambda: calls.append("epoch")}
    # first calls: step 3.0, epoch 5.0; warm rounds (step, epoch): (0.8, 0.5), (0.9, 0.4)
    # -> step compile 2.2, 0.1 s/step; epoch compile 4.6, 0.05 s/step
    timings = st.probe(
        runners, steps=8, repeats=2, clock=fake_clock([3.0, 5.0, 0.8, 0.5, 0.9, 0.4])
    )
    # the warm calls interleave round by round: a drifting machine slows both alike
    assert calls == ["step", "epoch"] + ["step", "epoch"] * 2
    assert timings["step"].compile_seconds == pytest.approx(2.2)
    assert timings["step"].step_seconds == pytest.approx(0.1)
    assert timings["epoch"].compile_seconds == pytest.approx(4.6)
    assert timings["epoch"].step_seconds == pytest.approx(0.05)
    # a step count per runner: the same calls, per step over each runner's own count
    timings = st.probe(
        runners,
        steps={"step": 8, "epoch": 4},
        repeats=2,
        clock=fake_clock([3.0, 5.0, 0.8, 0.5, 0.9, 0.4]),
    )
    assert timings["epoch"].step_seconds == pytest.approx(0.1)
    with pytest.raises(ValueError, match="'epoch'"):
        st.probe(runners, steps={"step": 8})


# ----------------------------------------------------------------------------- cache
def test_cache_path_precedence():
    assert st.cache_path({"JAXGRAD_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x"}) == "/c/strategy.json"
    assert st.cache_path({"XDG_CACHE_HOME": "/x"}) == "/x/jaxgrad/strategy.json"
    assert st.cache_path({}).endswith(os.path.join(".cache", "jaxgrad", "strategy.json"))


def test_cache_key_is_stable_and_sensitive():
    parts = {
        "model": "Sequential(...)",
        "x": [[4], "float32"],
        "jax": "0.10.2",
        "cpu": "AMD EPYC",
        "cpu_flags": ["avx2"],
        "device_kind": "cpu",
    }
    assert st.cache_key(parts) == st.cache_key(dict(reversed(list(parts.items()))))
    for name, other in [
        ("x", [[5], "float32"]),
        ("jax", "0.10.3"),
        ("cpu_flags", ["avx512f"]),
        ("device_kind", "NVIDIA H200"),
        ("cpu", "Intel Xeon"),
    ]:
        assert st.cache_key({**parts, name: other}) != st.cache_key(parts), name


def test_describe_model_drops_addresses():
    class Thing:
        def __repr__(self):
            return "Thing(fn=<function f at 0x7f4470793a60>)"

    assert st.describe_model(Thing()) == "Thing(fn=<function f>)"


def test_cache_roundtrip(tmp_path):
    path = str(tmp_path / "sub" / "strategy.json")
    assert st.read_cache(path, "k") is None
    assert st.write_cache(path, "k", TIMINGS, description={"model": "m"})
    assert st.read_cache(path, "k") == TIMINGS
    assert st.write_cache(path, "k2", {"step": st.Timing(0.5, 0.001)})
    assert st.read_cache(path, "k") == TIMINGS  # other entries are kept
    with open(path) as handle:
        data = json.load(handle)
    assert data["version"] == st.CACHE_VERSION
    assert data["entries"]["k"]["description"] == {"model": "m"}


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        '{"version": 99, "entries": {}}',
        '{"version": 1, "entries": {"k": {"timings": 3}}}',
        '{"version": 1, "entries": {"k": {"timings": '
        '{"step": {"compile_seconds": 1, "step_seconds": -1}}}}}',
    ],
)
def test_corrupt_cache_warns_and_is_reprobed(tmp_path, content):
    path = tmp_path / "strategy.json"
    path.write_text(content)
    with pytest.warns(RuntimeWarning, match="probing again"):
        assert st.read_cache(str(path), "k") is None
    assert st.write_cache(str(path), "k", TIMINGS)  # replaced, not a crash
    assert st.read_cache(str(path), "k") == TIMINGS


def test_unwritable_cache_warns(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(RuntimeWarning, match="could not be written"):
        assert not st.write_cache(str(blocker / "strategy.json"), "k", TIMINGS)


def test_select_probes_once_then_reads_the_cache(tmp_path):
    path = str(tmp_path / "strategy.json")
    made = []

    def make_runners(names, steps):
        made.append((tuple(names), steps))
        return {name: (lambda: None) for name in names}

    def fake_probe(runners, *, steps, clock):
        # the rolled epoch at 50 steps per call: as fast per step as at 8, no overhead
        return {name: TIMINGS.get(name, TIMINGS["epoch"]) for name in runners}

    kwargs = dict(
        key_parts={"model": "m"},
        total_steps=10_000,
        call_lengths=[50],
        path=path,
        probe_fn=fake_probe,
    )
    first = st.select(make_runners, **kwargs)
    # the candidates at 8 steps per call, then the rolled epoch at the run's 50
    assert made == [(("step", "epoch", "unroll:4", "unrolled"), 8), (("epoch",), 50)]
    assert (first.strategy, first.source, first.cache_path) == ("unroll:4", "probed", path)
    assert "cached in " + path in first.describe()
    second = st.select(make_runners, **{**kwargs, "total_steps": 100})
    assert len(made) == 2  # no second probe
    # the cached timings, re-costed for this run's length: a short run picks the step
    assert (second.strategy, second.source) == ("step", "cached")
    assert second.describe().startswith("step (cached: step 10.00 ms/step + 1.0 s compile")
    third = st.select(make_runners, **{**kwargs, "cache": False})
    assert len(made) == 4 and third.cache_path is None
    assert st.select(make_runners, **{**kwargs, "call_lengths": [1]}).describe() == (
        "step (one step per call: nothing to fuse)"
    )


# ---------------------------------------------------------------------------- trainers
SIZES = [4, 8, 3]


def _data(n=48):
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((n, SIZES[0])).astype(np.float32),
        rng.integers(0, SIZES[-1], n).astype(np.int32),
    )


def _trainer(strategy, **kwargs):
    model = nn.mlp(SIZES)
    params = model.init(jax.random.key(0))
    return Trainer(
        model,
        losses.cross_entropy,
        optim.sgd(lr=0.1, momentum=0.9),
        params,
        batch_size=4,
        seed=1,
        strategy=strategy,
        **kwargs,
    )


def test_trainer_forcing_and_errors():
    trainer = _trainer("unroll:4")
    assert trainer.strategy == "unroll:4" and trainer.fused
    assert trainer.strategy_choice.describe() == "unroll:4 (forced)"
    assert _trainer(None).strategy == "step" and not _trainer(None).fused
    assert _trainer(None, fused=True).strategy == "epoch"
    with pytest.raises(ValueError, match=r"`strategy` \(='fastest'\)"):
        _trainer("fastest")
    with pytest.raises(ValueError, match="`fused=True` contradicts `strategy`"):
        _trainer("step", fused=True)
    with pytest.raises(ValueError, match="`total_steps`"):
        _trainer("auto", total_steps=0)


def test_every_strategy_ends_with_the_same_params():
    x, y = _data()
    final = {}
    for strategy in ("step", "epoch", "unroll:4", "unrolled"):
        trainer = _trainer(strategy)
        result = trainer.train_epoch(x, y)  # 12 steps
        assert result.steps == 12 and trainer.global_step == 12
        final[strategy] = {k: np.asarray(v) for k, v in trainer.params.items()}
    for params in final.values():  # the float32 tier, as step vs epoch
        assert_parity(final["step"], params)


def test_auto_probes_on_copies_then_reads_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXGRAD_CACHE_DIR", str(tmp_path))
    x, y = _data()
    trainer = _trainer("auto", total_steps=10**9)  # long enough to probe every candidate
    before = {k: np.asarray(v) for k, v in trainer.params.items()}
    choice = trainer.choose_strategy(x, y)
    assert choice.source == "probed" and not choice.note
    assert choice.cache_path == str(tmp_path / "strategy.json")
    assert os.path.exists(choice.cache_path)
    assert set(choice.timings) == {"step", "epoch", "unroll:4", "unrolled"}
    assert trainer.strategy == choice.strategy and trainer.global_step == 0
    for k, v in trainer.params.items():  # the probe ran on copies
        np.testing.assert_array_equal(np.asarray(v), before[k])
    again = _trainer("auto", total_steps=24)
    assert again.choose_strategy(x, y).source == "cached"


def test_probe_budget_by_hand():
    # step: 1 s compile, 10 ms/step; each fused candidate costs at least 1 s + 4 calls
    # of 8 steps (0.32 s), the rolled epoch 4 more calls of 50 (2 s): 3.32, 1.32, 1.32
    step = st.Timing(1.0, 0.010)
    names = ["epoch", "unroll:4", "unrolled"]
    kept, least = st.probe_budget(step, names, total_steps=10_000, probe_steps=8, long_steps=50)
    assert kept == names and least == pytest.approx(5.96)
    # a 500-step run (5 s stepped) pays for the epoch and unroll:4 only; 300 for none
    assert st.probe_budget(step, names, total_steps=500, probe_steps=8, long_steps=50)[0] == [
        "epoch",
        "unroll:4",
    ]
    assert st.probe_budget(step, names, total_steps=300, probe_steps=8, long_steps=50)[0] == []


def test_select_skips_a_probe_longer_than_the_run(tmp_path):
    """A run shorter than the probe: the step alone is probed (its compile is the run's),
    nothing is cached, and the choice says what was left out and why; a run that can
    pay for part of the probe probes that part, in order."""
    path = str(tmp_path / "strategy.json")
    probed = []

    def fake_probe(runners, *, steps, clock):
        probed.append(tuple(runners))
        return {name: TIMINGS.get(name, TIMINGS["epoch"]) for name in runners}

    kwargs = dict(key_parts={"model": "m"}, call_lengths=[50], path=path, probe_fn=fake_probe)
    short = st.select(
        lambda names, steps: {n: (lambda: None) for n in names}, total_steps=100, **kwargs
    )  # 1 s stepped < 1.32 s for the epoch alone
    assert probed == [("step",)]
    assert (short.strategy, short.source, short.cache_path) == ("step", "probed", None)
    assert set(short.timings) == {"step"} and not os.path.exists(path)
    assert short.describe() == (
        "step (probed: step 10.00 ms/step + 1.0 s compile; epoch, unroll:4 and unrolled "
        "not probed: the run's 100 steps take ~1 s stepped, less than probing them would "
        "cost (at least 6 s for all 3))"
    )
    probed.clear()
    middle = st.select(
        lambda names, steps: {n: (lambda: None) for n in names}, total_steps=500, **kwargs
    )
    assert probed == [("step",), ("step", "epoch", "unroll:4", "epoch, 50 steps per call")]
    assert set(middle.timings) == {"step", "epoch", "unroll:4"}
    assert "unrolled not probed" in middle.describe() and middle.cache_path is None


def test_checkpoints_never_compile_a_new_stretch_length(tmp_path):
    """Checkpoints every 5 steps of a 12-step epoch cut stretches of 5, 5, 2, then 3, 5,
    4, ...: every fused strategy still runs one compiled call (none after the first
    epoch), and ends with the same params, bit for bit, as the run without checkpoints."""
    import jax.monitoring

    compiles = []

    def on_event(name, seconds, **_):
        if name == "/jax/core/compile/backend_compile_duration":
            compiles.append(name)

    x, y = _data()
    jax.monitoring.register_event_duration_secs_listener(on_event)
    try:
        for strategy in ("epoch", "unroll:4", "unrolled"):
            final = {}
            for every in (None, 5):
                directory = str(tmp_path / f"{strategy}-{every}")
                trainer = _trainer(
                    strategy, checkpoint_dir=directory if every else None, checkpoint_every=every
                )
                trainer.train_epoch(x, y)
                del compiles[:]
                for _ in range(3):
                    trainer.train_epoch(x, y)
                assert compiles == [], (strategy, every)
                assert trainer._epoch_fn(strategy)._cache_size() == 1
                final[every] = {k: np.asarray(v) for k, v in trainer.params.items()}
            for name, value in final[None].items():
                np.testing.assert_array_equal(final[5][name], value, err_msg=strategy)
    finally:
        jax.monitoring.unregister_event_duration_listener(on_event)


def test_resume_keeps_the_checkpoints_strategy(tmp_path):
    x, y = _data()
    first = _trainer("unroll:4", checkpoint_dir=str(tmp_path), checkpoint_every=5)
    first.train_epoch(x, y)
    resumed = _trainer("auto", checkpoint_dir=str(tmp_path), checkpoint_every=5)
    resumed.resume()
    assert resumed.strategy == "unroll:4"
    assert resumed.strategy_choice.describe() == "unroll:4 (the resumed checkpoint's)"


def test_stateful_trainer_strategies_agree():
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Linear(6, 3)
    )
    model, params, buffers = nn.from_torch(module, with_buffers=True)
    x, y = _data(40)
    final = {}
    for strategy in ("epoch", "step"):
        trainer = StatefulTrainer(
            model,
            losses.cross_entropy,
            optim.sgd(lr=0.1, momentum=0.9),
            params,
            buffers,
            batch_size=8,
            seed=3,
            strategy=strategy,
        )
        losses_ = trainer.train_epoch(x, y).losses
        assert losses_.shape == (5,)
        final[strategy] = trainer.state_dict_numpy()
    for state in final.values():
        assert_parity(final["epoch"], state)
    with pytest.raises(ValueError, match="`strategy`"):
        StatefulTrainer(
            model,
            losses.cross_entropy,
            optim.sgd(lr=0.1),
            params,
            buffers,
            batch_size=8,
            strategy="rolled",
        )


def test_select_first_writer_wins(tmp_path):
    """Two runs probing the same key at once: the one that finishes second takes the
    first one's timings, so both make the same choice."""
    path = str(tmp_path / "strategy.json")
    key_parts = {"model": "m"}
    theirs = {
        name: st.Timing(0.0, 0.001 if name == "unrolled" else 1.0)
        for name in ("step", "epoch", "unroll:4", "unrolled")
    }

    def make_runners(names, steps):  # another process writes while this one probes
        if len(names) > 1:  # (not for the rolled epoch's second, longer probe)
            key = st.cache_key(
                {**key_parts, "candidates": list(names), "probe_steps": steps, "overhead_steps": 50}
            )
            st.write_cache(path, key, theirs)
        return {name: (lambda: None) for name in names}

    choice = st.select(
        make_runners,
        key_parts=key_parts,
        total_steps=100,
        call_lengths=[50],
        path=path,
        probe_fn=lambda runners, **_: {
            name: TIMINGS.get(name, TIMINGS["epoch"]) for name in runners
        },
    )
    assert (choice.strategy, choice.source) == ("unrolled", "cached")
    assert dict(choice.timings) == theirs


def test_train_script_defaults_to_auto_and_takes_jaxgrad_strategy(monkeypatch, capsys):
    """train.py: auto unless $JAXGRAD_STRATEGY says otherwise; --strategy wins over it;
    a bad value is refused naming where it came from."""
    import train

    monkeypatch.delenv("JAXGRAD_STRATEGY", raising=False)
    assert train.parse_args(["--epochs", "1"]).strategy == "auto"
    monkeypatch.setenv("JAXGRAD_STRATEGY", "unroll:8")
    assert train.parse_args(["--epochs", "1"]).strategy == "unroll:8"
    assert train.parse_args(["--epochs", "1", "--strategy", "step"]).strategy == "step"
    assert train.parse_args(["--epochs", "1", "--fused"]).strategy == "epoch"
    monkeypatch.setenv("JAXGRAD_STRATEGY", "fastest")
    with pytest.raises(SystemExit) as exit_info:
        train.parse_args(["--epochs", "1"])
    assert exit_info.value.code == 2
    assert "`$JAXGRAD_STRATEGY` (='fastest') must be one of" in capsys.readouterr().err


def test_select_takes_the_call_overhead_out_of_the_fused_probe(tmp_path):
    """The 784-256-10 MLP's case, by hand: per step, the loop of steps and an 8-step
    epoch tie (0.8 ms); the epoch's 50-step calls take 34.6 ms. So a call costs
    6.4 - 8·(28.2/42) ≈ 1.03 ms beyond its steps, and 10,000 steps in 50-step calls
    cost 6.71 + 200 × 0.00103 ≈ 6.92 s fused against 8.0 s stepped: the epoch."""
    long_name = "epoch, 50 steps per call"
    probed = {
        "step": st.Timing(0.0, 0.0008),
        "epoch": st.Timing(0.0, 0.0008),
        "unroll:4": st.Timing(0.0, 0.0009),
        "unrolled": st.Timing(0.0, 0.0009),
        long_name: st.Timing(0.0, 0.0346 / 50),
    }
    choice = st.select(
        lambda names, steps: {name: (lambda: None) for name in names},
        key_parts={"model": "mlp"},
        total_steps=10_000,
        call_lengths=[50],
        path=str(tmp_path / "strategy.json"),
        probe_fn=lambda runners, **_: {n: probed[n] for n in runners},
    )
    assert choice.strategy == "epoch"
    assert choice.estimates["step"] == pytest.approx(8.0)
    assert choice.estimates["epoch"] == pytest.approx(
        10_000 * 0.0282 / 42 + 200 * (0.0064 - 8 * 0.0282 / 42)
    )
    assert "ms/call" in choice.describe()
    # without the second length the tie goes to the step
    tie = st.choose(
        {k: v for k, v in probed.items() if k != long_name},
        total_steps=10_000,
        call_lengths=[50],
        probe_steps=8,
    )
    assert tie[0] == "step"
