"""strata.distributed from Python: two ranks started by `strata launch`
(the C++ launcher runs any program), collectives, and DistributedDataParallel
keeping the ranks' models equal while each trains on its own data."""
import os
import subprocess
import sys

import pytest

import strata

RANK_PROGRAM = r'''
import numpy as np
import strata
import strata.distributed as dist

dist.init_process_group()
r, n = dist.rank(), dist.world_size()
t = strata.tensor([float(r + 1), 10.0])
dist.all_reduce(t, "sum").wait()
assert t.tolist() == [n * (n + 1) / 2, 10.0 * n], t.tolist()

strata.manual_seed(100 + r)                      # different initial weights per rank ...
model = dist.DistributedDataParallel(strata.nn.Linear(3, 1))   # ... made rank 0's here
opt = strata.nn.SGD(model.parameters(), lr=0.1)
x = strata.randn(8, 3)                           # each rank its own data
for _ in range(5):
    opt.zero_grad()
    loss = ((model(x) - 1.0) ** 2.0).mean()
    loss.backward()
    opt.step()
w = model.module.weight.detach().clone()
lo, hi = w.clone(), w.clone()
dist.all_reduce(lo, "min").wait()
dist.all_reduce(hi, "max").wait()
assert np.array_equal(lo.numpy(), hi.numpy()), (lo, hi)

# gather, scatter, all_to_all, reduce_scatter, send/recv.
rows = strata.zeros([n, 2])
dist.gather(rows, strata.tensor([float(r), 1.0]), 0).wait()
if r == 0:
    assert rows.tolist() == [[float(k), 1.0] for k in range(n)], rows.tolist()
mine = strata.zeros([2])
dist.scatter(mine, strata.tensor([[float(10 * k), 1.0] for k in range(n)]), 0).wait()
assert mine.tolist() == [10.0 * r, 1.0], mine.tolist()
out = strata.zeros([n, 1])
dist.all_to_all(out, strata.tensor([[float(100 * r + k)] for k in range(n)])).wait()
assert out.tolist() == [[float(100 * k + r)] for k in range(n)], out.tolist()
part = strata.zeros([1])
dist.reduce_scatter(part, strata.tensor([[float(k)] for k in range(n)]), "sum").wait()
assert part.tolist() == [float(n * r)], part.tolist()
box = strata.zeros([3])
if r == 0:
    dist.send(strata.tensor([1.0, 2.0, 3.0]), 1, tag=5).wait()
elif r == 1:
    dist.recv(box, 0, tag=5).wait()
    assert box.tolist() == [1.0, 2.0, 3.0], box.tolist()
# A sub-group of rank 1 alone, and the default group's refusal for a
# non-member.
solo = dist.new_group([1])
assert solo.world_ranks == [1] and solo.is_member == (r == 1)
if r == 1:
    one = strata.tensor([5.0])
    solo.all_reduce(one).wait()
    assert one.tolist() == [5.0]
else:
    try:
        solo.all_reduce(strata.tensor([1.0]))
        raise AssertionError("a non-member used the group")
    except strata.Error as e:
        assert "rank 0 of the default group is not a member" in str(e), str(e)
dist.barrier()
print(f"rank {r} of {n}: ok")
'''


def launch_two(tmp_path, text, *args):
    """Runs the program `text` on two ranks with `strata launch`; its output."""
    launcher = os.path.join(os.environ.get("STRATA_BUILD_BIN", ""), "strata")
    if not os.path.exists(launcher):
        pytest.fail(f"the strata launcher is not at {launcher} (STRATA_BUILD_BIN, set by CTest)")
    program = tmp_path / "rank.py"
    program.write_text(text)
    done = subprocess.run([launcher, "launch", "-n", "2", sys.executable, str(program), *args], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, STRATA_THREADS="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.skipif(not strata.distributed.available, reason="this build has no libstrata_distributed (Gloo)")
def test_two_ranks_reduce_and_train_in_step(tmp_path):
    out = launch_two(tmp_path, RANK_PROGRAM)
    assert "rank 0 of 2: ok" in out and "rank 1 of 2: ok" in out, out


TRAINING_PROGRAM = r'''
import sys
import numpy as np
import strata
import strata.distributed as dist
from strata import nn

dist.init_process_group()
r, n = dist.rank(), dist.world_size()
workdir = sys.argv[1]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 16)
        self.b = nn.Linear(16, 16)
        self.c = nn.Linear(16, 3)
        self.register_buffer("seen", strata.zeros([1]))

    def forward(self, x):
        return self.c(strata.tanh(self.b(strata.tanh(self.a(x)))))


def net(seed):
    strata.manual_seed(seed)
    return Net()


strata.manual_seed(7)
X = strata.randn(16, 6)
Y = strata.tensor(np.arange(16, dtype=np.int64) % 3)
per = 16 // n
x, y = X[r * per:(r + 1) * per], Y[r * per:(r + 1) * per]


def grads(m):
    return [p.grad.numpy().copy() for p in m.parameters()]


# The whole batch in one process: the reference gradients.
ref = net(1)
nn.functional.cross_entropy(ref(X), Y).backward()

# DDP: buckets of 1 KiB (several), started during backward; the average
# equals the whole batch's gradients.
model = net(1 + r)                          # ranks start apart: made rank 0's
model.seen = strata.full([1], float(r))     # a buffer, made rank 0's too
ddp = dist.DistributedDataParallel(model, bucket_cap_mb=1 / 1024)
assert model.seen.tolist() == [0.0], model.seen.tolist()
layout = ddp.bucket_layout()
assert len(layout) >= 3 and layout[0][0] == "c.bias", layout
nn.functional.cross_entropy(ddp(x), y).backward()
for g, want in zip(grads(model), grads(ref)):
    assert np.abs(g - want).max() < 1e-6, np.abs(g - want).max()
st = ddp.stats()
assert st["reduced_passes"] == 1 and st["buckets_overlapped"] >= 2, st
assert len(st["last_launch_us"]) == len(layout), st

# no_sync: two local passes, then one synchronised: the average of the sums.
model.zero_grad()
with ddp.no_sync():
    assert not ddp._ddp.sync_enabled
    nn.functional.cross_entropy(ddp(x), y).backward()
assert ddp._ddp.sync_enabled
nn.functional.cross_entropy(ddp(x), y).backward()
for g, want in zip(grads(model), grads(ref)):
    assert np.abs(g - 2 * want).max() < 1e-5, np.abs(g - 2 * want).max()

# A compression hook: bf16 buckets, the average to bf16's rounding.
small = net(1)
hooked = dist.DistributedDataParallel(small, comm_hook="bf16")
nn.functional.cross_entropy(hooked(x), y).backward()
for g, want in zip(grads(small), grads(ref)):
    assert np.abs(g - want).max() < 1e-2 * (1 + np.abs(want).max()), np.abs(g - want).max()
try:
    dist.DistributedDataParallel(net(1), comm_hook="fp8")
    raise AssertionError("an unknown hook was taken")
except ValueError as e:
    assert "'fp8'" in str(e), str(e)

# ZeRO: stage 1 with DDP and stage 2 alone take the unsharded Adam's steps.
def train(stage):
    m = net(3)
    if stage == 0:
        wrapped, opt = dist.DistributedDataParallel(m), nn.Adam(m.parameters(), lr=0.01)
    elif stage == 1:
        wrapped = dist.DistributedDataParallel(m)
        opt = dist.ShardedOptimizer(m.parameters(), nn.Adam, lr=0.01)
    else:
        wrapped, opt = m, dist.ShardedOptimizer(m.parameters(), nn.Adam, stage=2, bucket_cap_mb=1 / 1024, lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(wrapped(x), y).backward()
        opt.step()
    return m, opt

plain, _ = train(0)
for stage in (1, 2):
    m, opt = train(stage)
    assert opt.stage == stage and 0 < opt.state_bytes
    for p, q in zip(m.parameters(), plain.parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), (stage, np.abs(p.numpy() - q.numpy()).max())
assert sorted(opt.shard) == [i for i in range(len(opt.params)) if opt.owner(i) == r]
zs = opt.stats()
assert zs["reduced_passes"] == 3 and zs["buckets_overlapped"] >= 6, zs   # stage 2: buckets during backward
try:
    dist.ShardedOptimizer(m.parameters(), dict, lr=0.1)
    raise AssertionError("a class that is no strata optimizer was taken")
except TypeError as e:
    assert "must be strata.nn.SGD, Adam or AdamW, got dict" in str(e), str(e)
try:
    dist.ShardedOptimizer(m.parameters(), nn.Adam, momentum=0.9)
    raise AssertionError("an option Adam does not take was taken")
except TypeError as e:
    assert "Adam takes no option 'momentum'" in str(e), str(e)

# Checkpoints: rank 0 writes, every rank restores into a fresh model.
states = dist.Checkpointer(workdir + "/states")
assert states.restore(net(9), None) == -1 and states.latest() is None
adam = nn.Adam(plain.parameters(), lr=0.01)
states.save(4, plain, adam)
fresh = net(9)
fresh_opt = nn.Adam(fresh.parameters(), lr=0.01)
assert states.restore(fresh, fresh_opt) == 4 and states.latest().endswith("state-000000000004.st")
for p, q in zip(fresh.parameters(), plain.parameters()):
    assert np.array_equal(p.numpy(), q.numpy())

# Sharded checkpoints: every rank its shard; restored into fresh replicas.
shards = dist.ShardedCheckpointer(workdir + "/sharded")
shards.save(3, m, opt)
again = net(9)
again_opt = dist.ShardedOptimizer(again.parameters(), nn.Adam, stage=2, lr=0.01)
assert shards.restore(again, again_opt) == 3
for p, q in zip(again.parameters(), m.parameters()):
    assert np.array_equal(p.numpy(), q.numpy())
for model_, opt_ in ((again, again_opt), (m, opt)):     # one more step each: the same state gives the same step
    opt_.zero_grad()
    nn.functional.cross_entropy(model_(x), y).backward()
    opt_.step()
for p, q in zip(again.parameters(), m.parameters()):
    assert np.array_equal(p.numpy(), q.numpy())
dist.barrier()
print(f"rank {r} of {n}: trained")
'''


@pytest.mark.skipif(not strata.distributed.available, reason="this build has no libstrata_distributed (Gloo)")
def test_ddp_buckets_zero_and_checkpoints_from_two_ranks(tmp_path):
    out = launch_two(tmp_path, TRAINING_PROGRAM, str(tmp_path))
    assert "rank 0 of 2: trained" in out and "rank 1 of 2: trained" in out, out


@pytest.mark.skipif(not strata.distributed.available, reason="this build has no libstrata_distributed (Gloo)")
def test_the_launchers_variables_are_read(monkeypatch):
    import strata.distributed as dist
    for name in ("STRATA_RANK", "STRATA_WORLD_SIZE", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[07-08]")
    monkeypatch.setenv("SLURM_JOB_ID", "123456")
    e = dist.launch_environment()
    assert (e["launcher"], e["rank"], e["world_size"], e["local_rank"]) == ("Slurm", 3, 8, 1)
    assert (e["master_addr"], e["master_port"]) == ("gpu07", 15000 + 3456)
    monkeypatch.setenv("SLURM_LOCALID", "4")  # above the rank: refused, naming both
    with pytest.raises(strata.Error, match="SLURM_LOCALID=4 cannot be the local rank of SLURM_PROCID=3"):
        dist.launch_environment()


@pytest.mark.skipif(not strata.distributed.available, reason="this build has no libstrata_distributed (Gloo)")
def test_the_sampler_splits_one_order_per_epoch():
    import strata.distributed as dist
    shares = [dist.DistributedSampler(10, seed=3, rank=k, world_size=3) for k in range(3)]
    for s in shares:
        s.set_epoch(2)
    seen = sorted(i for s in shares for i in s)
    assert len(shares[0]) == 4 and len(seen) == 12 and set(seen) == set(range(10))
    with pytest.raises(strata.ValueError, match="rank 3 is not in 0..2"):
        dist.DistributedSampler(10, rank=3, world_size=3)

