#!/usr/bin/python3
"""Reference values for vmap_reference_test.cpp, from PyTorch's functorch.

Run with Debian's PyTorch (python3-torch 1.13, which ships functorch):

    /usr/bin/python3 tests/autograd/data/gen_vmap_reference.py > tests/autograd/data/vmap_functorch_reference.json

Every input is a closed-form value, value(i) = scale * sin(0.37 * i + phase)
for the i-th element in row-major order, so the C++ test builds the same
tensors without reading them; everything is float64. The cases:

- per_sample_mlp: functorch.vmap(functorch.grad(loss), in_dims=(None, 0, 0))
  of a 5-4-3 tanh MLP's squared error, the gradients of w1, b1, w2 per example;
- jacfwd / jacrev: vmap(jacfwd(f)) and vmap(jacrev(f)) of f(x) = tanh(W x) * sin(x[:3]);
- hessian: vmap(hessian(g)) of g(x) = sum(sin(x) * x^2) + x0 * x1 * x2;
- nested: vmap(vmap(h, in_dims=(0, None)), in_dims=(None, 0)) of
  h(a, b) = sum(tanh(a * b)), pairs of rows of two matrices.
"""
import json
import math

import torch
from functorch import grad, hessian, jacfwd, jacrev, vmap

torch.set_default_dtype(torch.float64)


def values(shape, scale=1.0, phase=0.0):
    n = 1
    for s in shape:
        n *= s
    flat = torch.tensor([scale * math.sin(0.37 * i + phase) for i in range(n)])
    return flat.reshape(shape)


def listed(t):
    return {"shape": list(t.shape), "values": [float(v) for v in t.reshape(-1).tolist()]}


def mlp_loss(params, x, y):
    w1, b1, w2 = params
    h = torch.tanh(torch.tanh(x @ w1 + b1) @ w2)
    return ((h - y) ** 2).sum()


def f(x):
    W = values((3, 4), 0.5, 0.3)
    return torch.tanh(W @ x) * torch.sin(x[:3])


def g(x):
    return (torch.sin(x) * x * x).sum() + (x[0] * x[1] * x[2])


def h(a, b):
    return torch.tanh(a * b).sum()


def main():
    out = {}
    params = (values((5, 4), 0.6, 0.1), values((4,), 0.2, 0.2), values((4, 3), 0.7, 0.3))
    xs, ys = values((6, 5), 1.0, 0.4), values((6, 3), 0.5, 0.5)
    per_sample = vmap(grad(mlp_loss), in_dims=(None, 0, 0))(params, xs, ys)
    out["per_sample_mlp"] = {"w1": listed(per_sample[0]), "b1": listed(per_sample[1]), "w2": listed(per_sample[2])}
    batch = values((5, 4), 0.9, 0.6)
    out["jacfwd"] = listed(vmap(jacfwd(f))(batch))
    out["jacrev"] = listed(vmap(jacrev(f))(batch))
    out["hessian"] = listed(vmap(hessian(g))(batch))
    a, b = values((3, 4), 1.0, 0.7), values((5, 4), 1.0, 0.8)
    out["nested"] = listed(vmap(vmap(h, in_dims=(0, None)), in_dims=(None, 0))(a, b))
    out["generator"] = "torch %s, functorch (tests/autograd/data/gen_vmap_reference.py)" % torch.__version__
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
