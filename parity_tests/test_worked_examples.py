"""Every number the lessons print, computed by hand, by jax.grad and by torch, independently.

The expected values are the lessons' own printed numbers (``ScalarExample.expected``,
each with the number of decimals the lesson prints); the three computations never see
each other's results.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jaxgrad
import torchref
from jaxgrad.lessons import EXAMPLES, agrees_to_printed_digits, hand_result, jax_result, two_layer

CASES = [(ex, name) for ex in EXAMPLES for name in ex.expected]


@pytest.mark.parametrize("example,name", CASES, ids=[f"{e.key}:{n}" for e, n in CASES])
def test_lesson_number_by_hand_jax_and_torch(example, name):
    value, decimals = example.expected[name]
    computed = {
        "by hand": hand_result(example)[0][name],
        "jax.grad": jax_result(example, jnp.float32)[name],
        "torch": torchref.lessons.EXAMPLES[example.key](example.params, example.data)[name],
    }
    for who, result in computed.items():
        assert agrees_to_printed_digits(result, value, decimals), (who, result, value)


def test_dead_relu_gives_exactly_zero_for_w1_and_b1():
    example = next(e for e in EXAMPLES if e.key == "dead_relu")
    torched = torchref.lessons.tiny_relu(example.params, example.data)
    jaxed = jax_result(example)
    for name in ("dL/dw1", "dL/db1"):
        assert torched[name] == 0.0 and jaxed[name] == 0.0


def test_printed_digits_check_can_fail():
    assert agrees_to_printed_digits(14.1000, 14.1, 4)
    assert not agrees_to_printed_digits(14.1001, 14.1, 4)
    assert not agrees_to_printed_digits(-0.2126, -0.212, 3)


def test_hand_steps_print_each_multiplication():
    example = next(e for e in EXAMPLES if e.key == "tiny_relu")
    _, steps = hand_result(example)
    assert "dL/dz2 = 2(z2 − y) = 2 × -2.35 = -4.7" in steps
    assert "dL/dw1 = dL/dz1 · x = 7.05 × 2 = 14.1" in steps


@pytest.fixture(scope="module")
def lesson_data():
    return two_layer.lesson_data()


def test_two_layer_hand_backward_agrees_with_central_differences(lesson_data):
    hand = two_layer.numpy_backward(*(lesson_data[k] for k in ("X", "y", "W1", "b1", "W2", "b2")))
    numeric = two_layer.numeric_gradients(lesson_data)
    jaxgrad.assert_parity(numeric, hand, rtol=1e-6, atol=1e-8)  # finite-difference tier
    worst = max(np.abs(hand[k] - numeric[k]).max() for k in hand)
    assert worst < 1e-9  # the lesson: "~1e-10 … floating-point noise"


def test_two_layer_hand_jax_and_torch_gradients_agree(x64, lesson_data):
    hand = two_layer.numpy_backward(*(lesson_data[k] for k in ("X", "y", "W1", "b1", "W2", "b2")))
    jaxed = two_layer.jax_gradients(lesson_data)
    assert all(v.dtype == jnp.float64 for v in jaxed.values())
    torched = torchref.lessons.two_layer_gradients(
        two_layer.torch_state_dict(lesson_data), lesson_data["X"], lesson_data["y"]
    )
    jaxgrad.assert_parity(torched, jaxed)
    jaxgrad.assert_parity(hand, two_layer.from_torch_layout(torched))


def test_two_layer_training_trajectories_agree(x64, lesson_data):
    numpy_history = np.array(two_layer.numpy_train(lesson_data))
    jax_history = np.array(two_layer.jax_train(lesson_data))
    torch_history = np.array(
        torchref.lessons.two_layer_train(
            two_layer.torch_state_dict(lesson_data), lesson_data["X"], lesson_data["y"]
        )
    )
    assert numpy_history[:, 0].tolist() == [0, 100, 200, 300, 400]
    jaxgrad.assert_parity(torch_history, jax_history)
    jaxgrad.assert_parity(numpy_history, jax_history)
    assert numpy_history[-1, 1] < numpy_history[0, 1] / 100  # it trains
    assert numpy_history[-1, 2] == 1.0


def test_hand_gradients_script_prints_every_value(capsys):
    import hand_gradients

    assert hand_gradients.main(["--no-steps"]) == 0
    out = capsys.readouterr().out
    for fragment in (
        "14.1000",
        "5.5225",
        "-0.212",
        "0.521",
        "worst |hand − numeric|",
        "every value agrees with the lessons",
    ):
        assert fragment in out
