"""strata.nn: modules, losses and optimizers (docs/python.md).

Modules are Python classes in PyTorch's style, built on the C++ toolkit:
Linear draws its initial weights with the C++ nn::Linear (the same numbers
for the same seed), the losses are nn::functional's, the optimizers are the
C++ classes (fused updates), and state dicts are saved to and loaded from
the safetensors files the C++ side writes, under the same names
("0.weight", "l1.bias")."""
from collections import OrderedDict

from . import _strata
from ._strata import Tensor
from ._strata.nn import (  # noqa: F401  (the C++ classes and functions, one to one)
    SGD, Adam, AdamW, Optimizer, clip_grad_norm_, clip_grad_value_,
)

functional = _strata.nn


def Parameter(tensor):
    """A leaf that requires grad: what modules register as parameters."""
    t = tensor.detach()
    t.requires_grad_(True)
    return t


class Module:
    """Base of every module: assigning a Parameter (a leaf that requires
    grad), a Tensor buffer or a Module as an attribute registers it, in
    order, under the attribute's name."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.__init__ must call super().__init__() before assigning {name}")
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor):
            (self._parameters if value.requires_grad and value.is_leaf else self._buffers)[name] = value
        object.__setattr__(self, name, value)

    def register_buffer(self, name, tensor):
        self._buffers[name] = tensor
        object.__setattr__(self, name, tensor)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def named_parameters(self):
        for path, m in self.named_modules():
            for name, p in m._parameters.items():
                yield (f"{path}.{name}" if path else name), p

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def named_buffers(self):
        for path, m in self.named_modules():
            for name, b in m._buffers.items():
                yield (f"{path}.{name}" if path else name), b

    def children(self):
        return list(self._modules.values())

    def train(self, mode=True):
        for _, m in self.named_modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self):
        for p in self.parameters():
            p.grad = None

    def state_dict(self):
        """Parameters and buffers by dotted name, as the C++ Module names them."""
        out = OrderedDict()
        for path, m in self.named_modules():
            for table in (m._parameters, m._buffers):
                for name, t in table.items():
                    out[f"{path}.{name}" if path else name] = t
        return out

    def load_state_dict(self, state):
        """Copies every tensor of `state` into the module's (in place: the
        optimizers keep their parameters). Missing or unexpected names, and
        shapes that differ, are a ValueError naming them before anything is
        written."""
        own = self.state_dict()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if missing or unexpected:
            raise ValueError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
        for k, t in own.items():
            if tuple(state[k].shape) != tuple(t.shape):
                raise ValueError(f"load_state_dict: {k} has shape {tuple(state[k].shape)}, the module's {t.shape}")
        with _strata.no_grad():
            for k, t in own.items():
                t.copy_(state[k].to(t.device).to(t.dtype))

    def save(self, path, metadata=None):
        """Writes the state dict to a safetensors file (strata.load_tensors and
        the C++ load_tensors read it)."""
        _strata.save_tensors(path, dict(self.state_dict()), metadata or {})

    def load(self, path):
        tensors, _ = _strata.load_tensors(path)
        self.load_state_dict(tensors)

    def to(self, device):
        for path, m in self.named_modules():
            for table in (m._parameters, m._buffers):
                for name in list(table):
                    t = table[name]
                    moved = t.detach().to(device)
                    if t.requires_grad:
                        moved = Parameter(moved)
                    setattr(m, name, moved)
        return self

    def __repr__(self):
        lines = [f"{type(self).__name__}("]
        for name, m in self._modules.items():
            lines.append(f"  ({name}): " + repr(m).replace("\n", "\n  "))
        return "\n".join(lines) + ")" if len(lines) > 1 else f"{type(self).__name__}()"


class Linear(Module):
    """y = x·Wᵀ + b, W of [out_features, in_features], initialised as the C++
    nn::Linear is (PyTorch's rule, from the seeded generator)."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        w, b = _strata.nn._linear_init(in_features, out_features, bias)
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(w)
        self.bias = Parameter(b) if b is not None else None

    def forward(self, x):
        return _strata.linear(x, self.weight, self.bias)

    def __repr__(self):
        return f"Linear(in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None})"


class Sequential(Module):
    """Modules applied in order, registered as "0", "1", ..."""

    def __init__(self, *modules):
        super().__init__()
        for k, m in enumerate(modules):
            setattr(self, str(k), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, k):
        return list(self._modules.values())[k]

    def __len__(self):
        return len(self._modules)


def _activation(name, fn):
    cls = type(name, (Module,), {"forward": lambda self, x: fn(x), "__doc__": f"The {name} activation."})
    return cls


ReLU = _activation("ReLU", _strata.relu)
Tanh = _activation("Tanh", _strata.tanh)
Sigmoid = _activation("Sigmoid", _strata.sigmoid)
GELU = _activation("GELU", _strata.gelu)
SiLU = _activation("SiLU", _strata.silu)
Identity = _activation("Identity", lambda x: x)


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return functional.dropout(x, self.p, self.training)


class CrossEntropyLoss(Module):
    def __init__(self, reduction="mean", label_smoothing=0.0):
        super().__init__()
        self.reduction, self.label_smoothing = reduction, label_smoothing

    def forward(self, logits, target):
        return functional.cross_entropy(logits, target, self.reduction, self.label_smoothing)


class MSELoss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, x, target):
        return functional.mse_loss(x, target, self.reduction)
