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


@pytest.mark.skipif(not strata.distributed.available, reason="this build has no libstrata_distributed (Gloo)")
def test_two_ranks_reduce_and_train_in_step(tmp_path):
    launcher = os.path.join(os.environ.get("STRATA_BUILD_BIN", ""), "strata")
    if not os.path.exists(launcher):
        pytest.fail(f"the strata launcher is not at {launcher} (STRATA_BUILD_BIN, set by CTest)")
    program = tmp_path / "rank.py"
    program.write_text(RANK_PROGRAM)
    done = subprocess.run([launcher, "launch", "-n", "2", sys.executable, str(program)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, STRATA_THREADS="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rank 0 of 2: ok" in done.stdout and "rank 1 of 2: ok" in done.stdout, done.stdout


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

