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
        DistributedSampler, ProcessGroup, Work, destroy_process_group, init_process_group, is_initialized,
        launch_environment, new_group, rank, world_size,
    )

    # The default group's collectives, as functions (the C++ group's methods).
    def all_reduce(tensor, op="sum"):
        """Reduces `tensor` in place over the ranks ('sum', 'mean', 'max', 'min')."""
        return _d._default_group().all_reduce(tensor, op)

    def broadcast(tensor, src=0):
        """Every rank's `tensor` becomes rank `src`'s."""
        return _d._default_group().broadcast(tensor, src)

    def all_gather(output, input):
        """`output` ([world_size, *input.shape]) gets every rank's `input`."""
        return _d._default_group().all_gather(output, input)

    def reduce_scatter(output, input, op="sum"):
        """This rank's `output` becomes the reduction of row rank() of every rank's `input`."""
        return _d._default_group().reduce_scatter(output, input, op)

    def gather(output, input, dst=0):
        """Rank `dst`'s `output` ([world_size, *input.shape]) gets every rank's `input`."""
        return _d._default_group().gather(output, input, dst)

    def scatter(output, input, src=0):
        """Every rank's `output` gets row rank() of rank `src`'s `input`."""
        return _d._default_group().scatter(output, input, src)

    def all_to_all(output, input):
        """Rank r's output[q] gets rank q's input[r]."""
        return _d._default_group().all_to_all(output, input)

    def send(tensor, dst, tag=0):
        """Point to point: waits for rank `dst`'s matching recv."""
        return _d._default_group().send(tensor, dst, tag)

    def recv(tensor, src, tag=0):
        """Point to point: receives rank `src`'s matching send into `tensor`."""
        return _d._default_group().recv(tensor, src, tag)

    def barrier():
        """Returns once every rank has reached it."""
        _d._default_group().barrier().wait()


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
