"""The demo training job: a small numpy MLP, instrumented with a :class:`Recorder`.

Everything here does real work: the "accelerator" is the BLAS library (seeded
and warmed up), the data loader generates and normalises each batch, a step is
a forward pass, a backward pass and an Adam update of a two-hidden-layer MLP on
a synthetic classification task, checkpoints are atomic ``.npz`` writes, and
the eval computes loss and accuracy on a held-out set.

One failure is injected: the first attempt (``BADPUT_ATTEMPT=0``) exits with
code 1 a few steps after a checkpoint, so those steps are lost; the next
attempt restores the newest checkpoint, redoes them and finishes.

Run under the launcher (``badput demo`` does this)::

    badput run --job demo --max-restarts 2 -- python -m badput.demo.train --ckpt-dir /tmp/ck
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from badput.recorder import Recorder
from badput.runtime import env as _env

__all__ = ["TrainConfig", "main", "train"]

F32 = np.float32
Array = npt.NDArray[np.float32]

WARMUP_SIZE = 512
_CKPT_RE = re.compile(r"ckpt-(\d+)\.npz$")


@dataclass
class TrainConfig:
    """Sizes and schedule of the demo job (defaults: about 20 s on two cores)."""

    steps: int = 600
    batch: int = 512
    features: int = 256
    hidden: int = 768
    classes: int = 10
    ckpt_every: int = 50
    eval_every: int = 40
    eval_size: int = 2048
    crash_at: int | None = None  # default: 70% of the way from a checkpoint to the next
    print_every: int = 25
    lr: float = 1e-3
    seed: int = 0
    keep_checkpoints: int = 2
    warmup_matmuls: int = 40

    def crash_step(self) -> int:
        """The step after which attempt 0 dies (never a checkpoint step)."""
        if self.crash_at is not None:
            return self.crash_at
        saves = self.steps // self.ckpt_every
        k = max(1, (saves * 2) // 3)  # the k-th checkpoint, about two thirds through
        crash = k * self.ckpt_every + max(1, (self.ckpt_every * 7) // 10)
        return min(crash, self.steps - 1)


# -- data -----------------------------------------------------------------------


class Teacher:
    """A fixed random network whose argmax labels the inputs: a learnable task."""

    def __init__(self, cfg: TrainConfig) -> None:
        rng = np.random.default_rng([cfg.seed, 1])
        self.mix = rng.standard_normal((cfg.features, cfg.features)).astype(F32)
        self.mix /= np.sqrt(F32(cfg.features))
        self.w = rng.standard_normal((cfg.features, cfg.classes)).astype(F32)

    def batch(self, rng: np.random.Generator, n: int) -> tuple[Array, npt.NDArray[np.int64]]:
        """Generate ``n`` examples: correlated features, normalised, with teacher labels."""
        raw = rng.standard_normal((n, self.mix.shape[0]), dtype=F32)
        x = np.tanh(raw @ self.mix)  # correlated, bounded features
        x = (x - x.mean(axis=0, keepdims=True)) / (x.std(axis=0, keepdims=True) + F32(1e-5))
        y = np.argmax(x @ self.w, axis=1)
        return x.astype(F32, copy=False), y.astype(np.int64)


# -- model ----------------------------------------------------------------------

PARAM_NAMES = ("w1", "b1", "w2", "b2", "w3", "b3")


def init_params(cfg: TrainConfig) -> dict[str, Array]:
    rng = np.random.default_rng([cfg.seed, 2])

    def he(fan_in: int, fan_out: int) -> Array:
        w: Array = rng.standard_normal((fan_in, fan_out), dtype=F32)
        w *= F32(np.sqrt(2.0 / fan_in))
        return w

    return {
        "w1": he(cfg.features, cfg.hidden),
        "b1": np.zeros(cfg.hidden, F32),
        "w2": he(cfg.hidden, cfg.hidden),
        "b2": np.zeros(cfg.hidden, F32),
        "w3": he(cfg.hidden, cfg.classes),
        "b3": np.zeros(cfg.classes, F32),
    }


def forward(p: dict[str, Array], x: Array) -> tuple[Array, Array, Array]:
    h1 = np.maximum(x @ p["w1"] + p["b1"], F32(0))
    h2 = np.maximum(h1 @ p["w2"] + p["b2"], F32(0))
    return h1, h2, h2 @ p["w3"] + p["b3"]


def softmax_xent(logits: Array, y: npt.NDArray[np.int64]) -> tuple[float, Array, float]:
    """Mean cross-entropy, its gradient w.r.t. the logits, and accuracy."""
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    prob = e / e.sum(axis=1, keepdims=True)
    n = logits.shape[0]
    loss = float(-np.mean(np.log(prob[np.arange(n), y] + 1e-12)))
    grad = prob
    grad[np.arange(n), y] -= 1.0
    acc = float(np.mean(np.argmax(logits, axis=1) == y))
    return loss, (grad / F32(n)).astype(F32, copy=False), acc


def backward(p: dict[str, Array], x: Array, h1: Array, h2: Array, g: Array) -> dict[str, Array]:
    grads = {"w3": h2.T @ g, "b3": g.sum(axis=0)}
    g2 = (g @ p["w3"].T) * (h2 > 0)
    grads["w2"], grads["b2"] = h1.T @ g2, g2.sum(axis=0)
    g1 = (g2 @ p["w2"].T) * (h1 > 0)
    grads["w1"], grads["b1"] = x.T @ g1, g1.sum(axis=0)
    return grads


class Adam:
    def __init__(self, params: dict[str, Array], lr: float) -> None:
        self.lr = lr
        self.t = 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def update(self, p: dict[str, Array], grads: dict[str, Array]) -> None:
        self.t += 1
        b1, b2, eps = 0.9, 0.999, 1e-8
        scale = self.lr * np.sqrt(1 - b2**self.t) / (1 - b1**self.t)
        for k, g in grads.items():
            m, v = self.m[k], self.v[k]
            m *= F32(b1)
            m += F32(1 - b1) * g
            v *= F32(b2)
            v += F32(1 - b2) * (g * g)
            p[k] -= F32(scale) * m / (np.sqrt(v) + F32(eps))


# -- checkpoints ----------------------------------------------------------------


def latest_checkpoint(ckpt_dir: str) -> tuple[int, str] | None:
    """``(step, path)`` of the newest complete checkpoint in ``ckpt_dir``."""
    found = _all_checkpoints(ckpt_dir)
    return max(found) if found else None


def save_checkpoint(
    ckpt_dir: str, step: int, params: dict[str, Array], opt: Adam, keep: int
) -> None:
    """Write atomically (temp file, fsync, rename); keep the newest ``keep``."""
    arrays: dict[str, npt.NDArray[np.generic]] = {"step": np.array(step), "t": np.array(opt.t)}
    for k in PARAM_NAMES:
        arrays[f"p_{k}"] = params[k]
        arrays[f"m_{k}"] = opt.m[k]
        arrays[f"v_{k}"] = opt.v[k]
    final = os.path.join(ckpt_dir, f"ckpt-{step:06d}.npz")
    tmp = final + f".tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    for _, old in sorted(_all_checkpoints(ckpt_dir))[:-keep]:
        os.remove(old)


def _all_checkpoints(ckpt_dir: str) -> list[tuple[int, str]]:
    out = []
    for path in glob.glob(os.path.join(ckpt_dir, "ckpt-*.npz")):
        m = _CKPT_RE.search(os.path.basename(path))
        if m:
            out.append((int(m.group(1)), path))
    return out


def load_checkpoint(path: str, params: dict[str, Array], opt: Adam) -> int:
    with np.load(path) as data:
        for k in PARAM_NAMES:
            params[k] = data[f"p_{k}"].astype(F32)
            opt.m[k] = data[f"m_{k}"].astype(F32)
            opt.v[k] = data[f"v_{k}"].astype(F32)
        opt.t = int(data["t"])
        return int(data["step"])


# -- the job --------------------------------------------------------------------


def _say(attempt: str, message: str) -> None:
    print(f"  [attempt {attempt}] {message}", flush=True)


def train(cfg: TrainConfig, ckpt_dir: str, rec: Recorder, attempt: str) -> int:
    """Run (or resume) the job; return the process exit code."""
    os.makedirs(ckpt_dir, exist_ok=True)

    with rec.accelerator_init():
        # Seed, and warm the BLAS up (thread pool, caches): the CPU's "device init".
        warm = np.random.default_rng(cfg.seed).standard_normal((WARMUP_SIZE, WARMUP_SIZE), F32)
        for _ in range(cfg.warmup_matmuls):
            warm = np.tanh(warm @ warm.T / F32(WARMUP_SIZE))

    with rec.training_prep():
        teacher = Teacher(cfg)
        params = init_params(cfg)
        opt = Adam(params, cfg.lr)
        eval_x, eval_y = teacher.batch(np.random.default_rng([cfg.seed, 3]), cfg.eval_size)

    start = 0
    found = latest_checkpoint(ckpt_dir)
    if found is not None:
        ck_step, path = found
        with rec.checkpoint_restore(ck_step):
            start = load_checkpoint(path, params, opt)
        _say(attempt, f"restored checkpoint of step {start}; resuming at step {start + 1}")

    crash_at = cfg.crash_step() if attempt == "0" else None
    t_last, n_last = time.perf_counter(), 0
    loss = acc = float("nan")
    for n in range(start + 1, cfg.steps + 1):
        with rec.step(n):
            with rec.data_loading():
                x, y = teacher.batch(np.random.default_rng([cfg.seed, 4, n]), cfg.batch)
            h1, h2, logits = forward(params, x)
            loss, g, acc = softmax_xent(logits, y)
            opt.update(params, backward(params, x, h1, h2, g))
        n_last += 1

        if n % cfg.print_every == 0:
            now = time.perf_counter()
            ms = (now - t_last) / max(n_last, 1) * 1000.0
            _say(
                attempt,
                f"step {n:4d}/{cfg.steps}  loss {loss:.3f}  acc {acc:.2f}  {ms:.0f} ms/step",
            )
            t_last, n_last = now, 0
        if n % cfg.ckpt_every == 0:
            with rec.checkpoint_save(n):
                save_checkpoint(ckpt_dir, n, params, opt, cfg.keep_checkpoints)
        if n % cfg.eval_every == 0:
            with rec.custom("eval"):
                _, _, eval_logits = forward(params, eval_x)
                eval_loss, _, eval_acc = softmax_xent(eval_logits, eval_y)
            _say(attempt, f"eval at step {n}: loss {eval_loss:.3f}  acc {eval_acc:.2f}")
        if n == crash_at:
            _say(attempt, f"simulated crash after step {n}: exiting with code 1")
            return 1
    _say(attempt, f"finished {cfg.steps} steps: loss {loss:.3f}  acc {acc:.2f}")
    return 0


def _parser() -> argparse.ArgumentParser:
    d = TrainConfig()
    p = argparse.ArgumentParser(prog="python -m badput.demo.train", description=__doc__)
    p.add_argument("--ckpt-dir", required=True, help="where checkpoints are written")
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--batch", type=int, default=d.batch)
    p.add_argument("--features", type=int, default=d.features)
    p.add_argument("--hidden", type=int, default=d.hidden)
    p.add_argument("--ckpt-every", type=int, default=d.ckpt_every)
    p.add_argument("--eval-every", type=int, default=d.eval_every)
    p.add_argument("--eval-size", type=int, default=d.eval_size)
    p.add_argument("--crash-at", type=int, default=None, help="step after which attempt 0 dies")
    p.add_argument("--print-every", type=int, default=d.print_every)
    p.add_argument("--warmup-matmuls", type=int, default=d.warmup_matmuls)
    p.add_argument("--seed", type=int, default=d.seed)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    cfg = TrainConfig(
        steps=a.steps,
        batch=a.batch,
        features=a.features,
        hidden=a.hidden,
        ckpt_every=a.ckpt_every,
        eval_every=a.eval_every,
        eval_size=a.eval_size,
        crash_at=a.crash_at,
        print_every=a.print_every,
        warmup_matmuls=a.warmup_matmuls,
        seed=a.seed,
    )
    attempt = os.environ.get(_env.BADPUT_ATTEMPT, "0")
    rec = Recorder()  # job, store and attempt come from the launcher's environment
    try:
        return train(cfg, a.ckpt_dir, rec, attempt)
    except KeyboardInterrupt:  # SIGINT forwarded by the launcher: stop quietly
        _say(attempt, "interrupted")
        return 130
    finally:
        rec.close()


if __name__ == "__main__":
    sys.exit(main())
