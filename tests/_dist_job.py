"""A real torch.distributed (gloo, CPU) DDP job for the multi-rank tests.

    python tests/_dist_job.py --world 4 --steps 40 [--slow-rank 1 --slow 0.09]
                              [--hang-rank 2 --hang-step 15 --hang-attempt 0]

Run without ``--rank``, it starts ``--world`` copies of itself (one per rank, in its
own process group, so that ``badput run`` kills them all) and waits for them. Each
rank records its steps, data loading and a timed ``forward`` section with a
:class:`badput.Recorder` (job, store and attempt from ``BADPUT_*``), and runs a
tiny DDP model: the backward's all-reduce makes every rank wait for the slowest.
``--slow-rank`` sleeps ``--slow`` seconds extra in its forward section;
``--hang-rank`` stops in its forward section at ``--hang-step`` (only in attempt
``--hang-attempt``) while the others wait in the all-reduce.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

FORWARD_SECONDS = 0.03  # every rank's forward "compute" (a sleep: steady on a shared CPU)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(args: argparse.Namespace, argv: list[str]) -> int:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    env["WORLD_SIZE"] = str(args.world)
    procs = [
        subprocess.Popen([sys.executable, __file__, *argv, "--rank", str(r)], env=env)
        for r in range(args.world)
    ]
    codes = [p.wait() for p in procs]
    return max(codes, key=abs)


def _train(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import badput

    rank = args.rank
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    rec = badput.Recorder(
        rank=rank, host=f"host{rank // 2}", heartbeat_interval=1.0, section_interval=0.5
    )
    attempt = os.environ.get("BADPUT_ATTEMPT", "0")
    hang_here = rank == args.hang_rank and attempt == str(args.hang_attempt)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        with rec.step(step):
            with rec.data_loading():
                x = torch.randn(8, 16)
                y = torch.randn(8, 4)
            with rec.section("forward"):
                out = model(x)
                time.sleep(FORWARD_SECONDS + (args.slow if rank == args.slow_rank else 0.0))
                if hang_here and step == args.hang_step:
                    time.sleep(3600)  # stuck: the others wait in the all-reduce below
            loss = torch.nn.functional.mse_loss(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    rec.close()
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--hang-rank", type=int, default=-1)
    parser.add_argument("--hang-step", type=int, default=-1)
    parser.add_argument("--hang-attempt", type=int, default=0)
    parser.add_argument("--rank", type=int, default=None)
    args = parser.parse_args()
    if args.rank is None:
        sys.exit(_launch(args, sys.argv[1:]))
    _train(args)


if __name__ == "__main__":
    main()
