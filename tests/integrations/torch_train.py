"""A small DDP training loop (gloo, CPU) for the integration tests, run by torchrun.

argv: total steps, checkpoint every N steps. Batches through ``TimedDataLoader``,
checkpoints with ``torch.distributed.checkpoint`` (async save, load). Rank 1 crashes
inside step $BADPUT_TEST_CRASH_AT of the first worker group of attempt 0; torchrun
restarts the group, which loads the newest complete checkpoint. Rank 1 hangs (sleeps)
inside step $BADPUT_TEST_HANG_AT of that group instead: ``badput run --hang-timeout`` kills it.
The truth file holds the script's own clock: its start after imports, the seconds of its
process-group calls and model building, and when its teardown (or hang) began; and its own
count of the samples and tokens of each step it trained on, and of the model's parameters.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _harness import Truth
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import badput
from badput.integrations.torch import TimedDataLoader, dcp_async_save, dcp_load, record_model

STEPS, EVERY = (int(a) for a in sys.argv[1:3])
CKPT = Path("ckpt").absolute()
SEQ = 6  # tokens of a sample


class Slow(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, truth: Truth) -> None:
        self.truth = truth

    def __len__(self) -> int:
        return 4 * STEPS  # 2 ranks x batches of 2

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        with self.truth.timed("data_loading"):
            time.sleep(0.01)
            return {"input_ids": torch.full((SEQ,), i % 7, dtype=torch.long)}


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.out = torch.nn.Linear(8, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(ids).mean(1))


def newest_complete() -> int | None:
    steps = [int(p.name) for p in CKPT.glob("*") if (p / ".metadata").exists()]
    return max(steps, default=None)


def main() -> None:
    started = time.time()  # the script's own clock: its imports are done
    # A rendezvous file per worker group: on a restart, torch 2.13's gloo workers read the
    # dead group's addresses from torchrun's store now and then (connection refused).
    group = f"{os.environ.get('BADPUT_ATTEMPT')}.{os.environ['TORCHELASTIC_RESTART_COUNT']}"
    t0 = time.perf_counter()
    # Before the recorder exists: the hook of badput.integrations.torch keeps the interval
    # for the first recorder of the process (distributed_init).
    dist.init_process_group(
        "gloo",
        init_method=f"file://{Path('pg-' + group).absolute()}",
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
    )
    init_seconds = time.perf_counter() - t0
    rank = dist.get_rank()
    truth = Truth(rank)
    truth.values["script_start"] = started
    truth.values["attempt"] = group  # the worker group: torchrun restarts inside attempt 0
    truth.add("distributed_init", init_seconds)
    atexit.register(truth.write)
    rec = badput.Recorder()  # job, store, attempt, rank: all from the launchers' environment
    rec.record_job_start()
    hang = os.environ.get("BADPUT_TEST_HANG_AT")
    with truth.timed("model_build"), rec.model_build():
        model = torch.nn.parallel.DistributedDataParallel(Net())
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    truth.values["params"] = sum(p.numel() for p in model.module.parameters())
    record_model(rec, model.module)
    prep = rec.training_prep()
    prep.__enter__()
    done = newest_complete()
    if done is not None:
        state = {"model": model.state_dict(), "opt": opt.state_dict()}
        with truth.timed("checkpoint_restore"):
            dcp_load(rec, state, done, checkpoint_id=str(CKPT / str(done)))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    start = done or 0
    sampler = DistributedSampler(Slow(truth), shuffle=False)
    loader = TimedDataLoader(DataLoader(sampler.dataset, batch_size=2, sampler=sampler), rec)
    crash = os.environ.get("BADPUT_TEST_CRASH_AT")
    first_group = os.environ.get("BADPUT_ATTEMPT") == "0" and os.environ.get(
        "TORCHELASTIC_RESTART_COUNT"
    ) in ("0", None)
    pending = None
    # async saves talk over their own group: DDP's collectives run beside them
    with truth.timed("distributed_init"):
        save_group = dist.new_group(backend="gloo")  # hooked: distributed_init
    batches = iter(loader)
    for _ in range(start):  # the batches the checkpoint already trained on
        next(batches)
    prep.__exit__(None, None, None)
    for step in range(start + 1, STEPS + 1):
        batch = next(batches)
        if hang and first_group and rank == 1 and step == int(hang):
            # A hang between two steps (host code, a data pipeline): rank 0 goes on into
            # the step and waits in DDP's all-reduce.
            truth.values["hung_from"] = time.time()
            truth.write()  # it never gets to exit: killed for the hang
            time.sleep(3600)
        with loader.step(step):
            if crash and first_group and rank == 1 and step == int(crash):
                truth.values["teardown_from"] = time.time()
                raise RuntimeError("injected crash")
            time.sleep(0.02)
            opt.zero_grad()
            model(batch["input_ids"]).pow(2).mean().backward()
            opt.step()
        # the script's own count of what this rank trained on
        truth.count(step, len(batch["input_ids"]), sum(len(s) for s in batch["input_ids"]))
        if step % EVERY == 0:
            if pending is not None:
                pending.result()
            with truth.timed("checkpoint_save"):
                pending = dcp_async_save(
                    rec,
                    {"model": model.state_dict(), "opt": opt.state_dict()},
                    step,
                    checkpoint_id=str(CKPT / str(step)),
                    process_group=save_group,
                )
    if pending is not None:
        getattr(pending, "upload_completion", pending).result()
    truth.values["teardown_from"] = time.time()
    rec.record_job_end()  # under badput run: the teardown begins
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
