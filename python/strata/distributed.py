"""strata.distributed: data-parallel training on Gloo (docs/distributed.md).

Start the ranks with the C++ launcher, which runs any program:

    strata launch -n 2 python train.py

and in train.py:

    import strata, strata.distributed as dist
    dist.init_process_group()
    model = dist.DistributedDataParallel(MyModel())
    ...
    loss.backward()            # gradients are averaged over the ranks
    opt.step()
"""
from . import _strata

_d = _strata.distributed
available = _d.available

if available:
    from ._strata.distributed import (  # noqa: F401  (the C++ API, one to one)
        Work, all_gather, all_reduce, all_to_all, barrier, broadcast, destroy_process_group, gather,
        init_process_group, is_initialized, launch_environment, rank, recv, reduce_scatter, scatter, send,
        world_size,
    )


class DistributedDataParallel:
    """Wraps a strata.nn.Module for data-parallel training: the parameters
    and buffers start as rank 0's (broadcast at construction), and during
    every backward pass each parameter's gradient is averaged over the ranks
    (a hook per parameter, one all-reduce each, in the order backward
    produces them: every rank runs the same graph). Unlike the C++
    DistributedDataParallel, it does not bucket the gradients or overlap the
    all-reduces with the backward pass."""

    def __init__(self, module):
        if not available:
            raise RuntimeError("strata.distributed: this build has no libstrata_distributed (Gloo)")
        if not is_initialized():
            raise RuntimeError("DistributedDataParallel: call strata.distributed.init_process_group() first")
        self.module = module
        for t in module.state_dict().values():
            with _strata.no_grad():
                broadcast(t, 0).wait()
        for p in module.parameters():
            p.register_hook(self._average)

    @staticmethod
    def _average(grad):
        g = grad.clone()
        all_reduce(g, "mean").wait()
        return g

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def parameters(self):
        return self.module.parameters()

    def state_dict(self):
        return self.module.state_dict()
