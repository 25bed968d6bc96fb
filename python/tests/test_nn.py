"""strata.nn: modules, losses, optimizers, state dicts in safetensors files."""
import numpy as np
import pytest

import strata
from strata import nn


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(4, 8)
        self.l2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.l2(strata.relu(self.l1(x)))


def test_modules_register_parameters_in_order_with_cxx_names():
    m = Mlp()
    assert [n for n, _ in m.named_parameters()] == ["l1.weight", "l1.bias", "l2.weight", "l2.bias"]
    assert all(p.requires_grad and p.is_leaf for p in m.parameters())
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert seq(strata.randn(5, 4)).shape == (5, 3)
    assert "Linear(in_features=4" in repr(seq)


def test_linear_is_initialised_as_the_cxx_layer():
    strata.manual_seed(7)
    a = nn.Linear(16, 4)
    strata.manual_seed(7)
    b = nn.Linear(16, 4)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    bound = 1 / np.sqrt(16)
    assert np.abs(a.weight.numpy()).max() <= bound and np.abs(a.bias.numpy()).max() <= bound


@pytest.mark.parametrize("make", [lambda p: nn.SGD(p, lr=0.1, momentum=0.9), lambda p: nn.Adam(p, lr=0.05),
                                  lambda p: nn.AdamW(p, lr=0.05)])
def test_a_model_learns_with_each_optimizer(make):
    strata.manual_seed(0)
    x = strata.randn(64, 4)
    y = strata.tensor((x.numpy()[:, 0] > 0).astype(np.int64) + (x.numpy()[:, 1] > 0).astype(np.int64))
    m = Mlp()
    opt = make(m.parameters())
    loss_fn = nn.CrossEntropyLoss()
    first = None
    for _ in range(60):
        opt.zero_grad()
        loss = loss_fn(m(x), y)
        loss.backward()
        nn.clip_grad_norm_(m.parameters(), 5.0)
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 0.5 * first
    assert opt.step_count == 60


def test_state_dicts_round_trip_through_safetensors_files(tmp_path):
    m = Mlp()
    path = tmp_path / "model.safetensors"
    m.save(path)
    tensors, metadata = strata.load_tensors(path)
    assert sorted(tensors) == sorted(m.state_dict())
    other = Mlp()
    other.load(path)
    x = strata.randn(3, 4)
    np.testing.assert_array_equal(other(x).numpy(), m(x).numpy())
    with pytest.raises(ValueError, match="missing"):
        other.load_state_dict({"l1.weight": m.l1.weight})
    with pytest.raises(strata.SerializationError, match="nope"):
        strata.load_tensors(tmp_path / "nope.safetensors")
    opt = nn.Adam(m.parameters())
    (m(x).sum()).backward()
    opt.step()
    state = opt.state_dict()
    assert any("exp_avg" in k for k in state)


def test_losses_and_bad_arguments():
    logits = strata.tensor([[2.0, 0.0, -1.0]])
    target = strata.tensor([0])
    p = np.exp([2.0, 0.0, -1.0])
    assert abs(nn.functional.cross_entropy(logits, target).item() + np.log(p[0] / p.sum())) < 1e-6
    assert nn.MSELoss()(strata.ones(3), strata.zeros(3)).item() == 1.0
    with pytest.raises(ValueError, match="reduction must be"):
        nn.functional.mse_loss(strata.ones(3), strata.zeros(3), "average")
    with pytest.raises(strata.ValueError, match="out of range"):
        nn.functional.cross_entropy(logits, strata.tensor([5]))
    with pytest.raises(AttributeError, match="super"):
        class Broken(nn.Module):
            def __init__(self):
                self.w = strata.ones(2)
        Broken()
