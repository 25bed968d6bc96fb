"""The Python examples run and do what they say."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import digits  # noqa: E402


def test_digits_trains_saves_and_reloads(capsys, device):
    acc = digits.main(["--epochs", "4", "--device", device])
    assert acc > 0.85
    assert capsys.readouterr().out.strip().startswith("test_accuracy=0.9")


def test_per_sample_gradients_agree_with_a_loop(capsys, device):
    import per_sample_grads

    worst = per_sample_grads.main(["--examples", "16", "--device", device])
    assert worst < 1e-5
    assert "max_difference=" in capsys.readouterr().out


def test_maml_meta_learns_through_second_order_gradients(capsys):
    import maml

    # 600 meta-iterations end at 0.70-0.78 of the first window's meta-loss
    # for seeds 0-3; a meta-gradient that does not learn stays near 1.
    ratio = maml.main(["--iterations", "600", "--seed", "0"])
    assert ratio < 0.9
    assert "maml_ratio=" in capsys.readouterr().out
