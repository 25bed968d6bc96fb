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
import contextlib

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
    """Wraps a strata.nn.Module for data-parallel training (PyTorch's
    DistributedDataParallel): the C++ wrapper's engine over the module's
    tensors. At construction the parameters and buffers become rank 0's;
    during every backward pass the gradients are averaged over the ranks in
    buckets of about `bucket_cap_mb` MiB, each bucket's all-reduce started
    as soon as backward has produced its gradients (overlapping the rest of
    the pass), last-registered parameters first.

    - find_unused_parameters: parameters a pass does not reach count as
      zero gradients (otherwise such a pass is an error naming them);
    - broadcast_buffers: rank 0's buffers are sent before every forward;
    - comm_hook: None, "bf16" or "f16": buckets are all-reduced in that
      dtype (half of f32's bytes) and widened back;
    - group: a ProcessGroup from new_group() (default: every rank).

    no_sync() accumulates gradients locally (the next synchronised pass
    averages the sum); join(loop) trains with uneven inputs; stats() and
    bucket_layout() show what was reduced and when (docs/distributed.md).
    Build it after moving the module to its device (Module.to replaces the
    parameters)."""

    def __init__(self, module, bucket_cap_mb=25, find_unused_parameters=False, broadcast_buffers=True,
                 comm_hook=None, group=None):
        if not available:
            raise RuntimeError("strata.distributed: this build has no libstrata_distributed (Gloo)")
        if not is_initialized():
            raise RuntimeError("DistributedDataParallel: call strata.distributed.init_process_group() first")
        if not bucket_cap_mb > 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be positive, got {bucket_cap_mb}")
        self.module = module
        self._ddp = _d._DDP(*_tensors(module),
                            max(1, int(bucket_cap_mb * (1 << 20))), find_unused_parameters, broadcast_buffers,
                            comm_hook or "", group)

    def __call__(self, *args, **kwargs):
        self._ddp.before_forward()
        return self.module(*args, **kwargs)

    def parameters(self):
        return self.module.parameters()

    def named_parameters(self):
        return self.module.named_parameters()

    def state_dict(self):
        return self.module.state_dict()

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate locally and do not communicate."""
        scope = self._ddp._no_sync()
        try:
            yield
        finally:
            del scope

    def join(self, loop):
        """Runs loop() (this rank's training steps) and returns when every
        rank's loop has ended; meanwhile a rank that ran out of data takes
        part in the others' steps with zero gradients."""
        self._ddp.join(loop)

    def bucket_layout(self):
        """Each bucket's parameter names, in the order they are reduced."""
        return self._ddp.bucket_layout()

    def stats(self):
        """Counters and the last pass's timeline (a dict; DDPStats in C++)."""
        return self._ddp.stats()


if available:
    _OPTIMIZER_KINDS = {_strata.nn.SGD: "SGD", _strata.nn.Adam: "Adam", _strata.nn.AdamW: "AdamW"}

    class ShardedOptimizer(_d.ShardedOptimizer):
        """ZeRO (PyTorch's ZeroRedundancyOptimizer is stage 1): every rank
        keeps the optimizer state of its share of the parameters only.

            opt = dist.ShardedOptimizer(model.parameters(), strata.nn.Adam, lr=1e-3)       # stage 1, with DDP
            opt = dist.ShardedOptimizer(model.parameters(), strata.nn.Adam, stage=2, lr=1e-3)  # no DDP

        Stage 2 averages the local gradients itself, reduce-scattering
        buckets of about `bucket_cap_mb` MiB during backward, so use it
        without DistributedDataParallel. optimizer_class is strata.nn.SGD,
        Adam or AdamW; the keywords are its options (lr, betas, eps,
        weight_decay; momentum, dampening, nesterov). stats() counts stage
        2's bucketed passes."""

        def __init__(self, params, optimizer_class, stage=1, group=None, bucket_cap_mb=25, **options):
            kind = _OPTIMIZER_KINDS.get(optimizer_class)
            if kind is None:
                raise TypeError("ShardedOptimizer: optimizer_class must be strata.nn.SGD, Adam or AdamW, got "
                                f"{getattr(optimizer_class, '__name__', repr(optimizer_class))}")
            betas = tuple(options.pop("betas", (0.9, 0.999)))
            if not bucket_cap_mb > 0:
                raise ValueError(f"ShardedOptimizer: bucket_cap_mb must be positive, got {bucket_cap_mb}")
            super().__init__(list(params), kind, {k: float(v) for k, v in options.items()}, betas, stage,
                             max(1, int(bucket_cap_mb * (1 << 20))), group)

    def _tensors(model):
        """A Python module's (name, tensor) pairs: parameters, then buffers."""
        return list(model.named_parameters()), list(model.named_buffers())

    class _StateDirectory:
        def latest(self):
            """The newest complete state's path, or None."""
            path = self._c.latest()
            return None if path is None else str(path)

    class Checkpointer(_StateDirectory):
        """Numbered training-state files in one directory, for restarts
        (`strata launch --max-restarts`, a requeued job): rank 0 writes
        `state-<step>.st` atomically and keeps the newest `keep`; every rank
        reads. The C++ Checkpointer's files, so either side reads the other's.

            states = dist.Checkpointer("run/states")
            done = states.restore(model, opt)      # -1: a fresh start
            for epoch in range(done + 1, epochs):
                ...
                states.save(epoch, model, opt)"""

        def __init__(self, directory, keep=2):
            self._c = _d._Checkpointer(str(directory), keep)

        def save(self, step, model, optimizer=None, scaler=None):
            extra = list(scaler.state_dict()) if scaler is not None else []
            self._c.save(step, *_tensors(model), optimizer, extra)

        def restore(self, model, optimizer=None, scaler=None):
            """Loads the newest state into model (in place), optimizer and
            scaler; returns its step, or -1 when there is none."""
            return self._c.restore(*_tensors(model), optimizer, scaler)

    class ShardedCheckpointer(_StateDirectory):
        """Training state of a ShardedOptimizer job: one directory per step,
        every rank writing its shard; a restart on another world size
        reshards (docs/distributed.md, "Restarts")."""

        def __init__(self, directory, keep=2):
            self._c = _d._ShardedCheckpointer(str(directory), keep)

        def save(self, step, model, optimizer):
            self._c.save(step, *_tensors(model), optimizer)

        def restore(self, model, optimizer):
            return self._c.restore(*_tensors(model), optimizer)
