#!/usr/bin/python3
"""Megatron's learning-rate schedule, to check megadlm's logged learning rates against.

Written from the formulas of Megatron-LM's OptimizerParamScheduler.get_lr and of
training.py's get_optimizer_param_scheduler and update_train_iters (Python floats throughout,
as there); it does not look at megadlm's C code.

  check LOG FLAGS...  every "iteration N/M | ... learning rate: X |" line of LOG (a run with
                      --log-interval 1 and no skipped iteration; several runs' logs may be
                      concatenated, e.g. before and after a resume) against Megatron's lr after
                      N steps of one global batch each, as Megatron's log prints it ({:.6E});
                      iterations 1..M must each appear once
  table FLAGS...      print iteration, samples, Megatron's lr for the run FLAGS describe

FLAGS: the run's megadlm flags; those of the schedule are read, the others ignored."""
import argparse
import math
import re
import sys


def parse_flags(words):
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--train-iters", type=int)
    p.add_argument("--train-samples", type=int)
    p.add_argument("--global-batch-size", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--lr-warmup-init", type=float, default=0.0)
    p.add_argument("--lr-decay-style", default="linear")
    p.add_argument("--lr-wsd-decay-style", default="exponential")
    p.add_argument("--lr-decay-iters", type=int)
    p.add_argument("--lr-decay-samples", type=int)
    p.add_argument("--lr-wsd-decay-iters", type=int)
    p.add_argument("--lr-wsd-decay-samples", type=int)
    p.add_argument("--lr-warmup-fraction", type=float)
    p.add_argument("--lr-warmup-iters", type=int, default=0)
    p.add_argument("--lr-warmup-samples", type=int, default=0)
    args, _ = p.parse_known_args(words)
    return args


class Schedule:
    """get_optimizer_param_scheduler: every length in samples."""

    def __init__(self, a):
        gbs = a.global_batch_size
        if a.train_iters:
            self.train_iters = a.train_iters
            decay_iters = a.lr_decay_iters if a.lr_decay_iters is not None else a.train_iters
            self.decay = decay_iters * gbs
            self.wsd = a.lr_wsd_decay_iters * gbs if a.lr_wsd_decay_iters is not None else None
            if a.lr_warmup_fraction is not None:
                self.warmup = a.lr_warmup_fraction * self.decay
            else:
                self.warmup = a.lr_warmup_iters * gbs
        else:  # sample-based; update_train_iters without a batch-size ramp-up
            self.train_iters = a.train_samples // gbs
            self.decay = a.lr_decay_samples if a.lr_decay_samples is not None else a.train_samples
            self.wsd = a.lr_wsd_decay_samples
            if a.lr_warmup_fraction is not None:
                self.warmup = a.lr_warmup_fraction * self.decay
            else:
                self.warmup = a.lr_warmup_samples
        self.init, self.max, self.min = a.lr_warmup_init, float(a.lr), a.min_lr
        self.style, self.wsd_style = a.lr_decay_style, a.lr_wsd_decay_style
        assert self.warmup < self.decay

    def lr(self, n):
        """get_lr after n samples of steps."""
        if self.warmup > 0 and n <= self.warmup:
            return self.init + ((self.max - self.init) * float(n) / float(self.warmup))
        if self.style == "constant":
            return self.max
        if n > self.decay:
            return self.min
        if self.style == "inverse-square-root":
            w = max(self.warmup, 1)
            m = max(n, 1)
            return max(self.min, self.max * w ** 0.5 / (m ** 0.5))
        ratio = float(n - self.warmup) / float(self.decay - self.warmup)
        assert 0.0 <= ratio <= 1.0
        delta = self.max - self.min
        if self.style == "linear":
            coeff = 1.0 - ratio
        elif self.style == "cosine":
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        elif self.style == "WSD":
            start = self.decay - self.wsd
            if n <= start:
                coeff = 1.0
            else:
                r = float(n - start) / float(self.wsd)
                coeff = {"linear": lambda: 1.0 - r,
                         "cosine": lambda: 0.5 * (math.cos(math.pi * r) + 1.0),
                         "exponential": lambda: (2.0 * math.pow(0.5, r)) - 1.0,
                         "minus_sqrt": lambda: 1.0 - math.sqrt(r)}[self.wsd_style]()
        else:
            raise SystemExit(f"unknown --lr-decay-style {self.style}")
        return self.min + coeff * delta


def printed_ok(logged, exact):
    """The log's text is Megatron's {:.6E} of the exact value; or, when a different rounding
    could come from a last-bit difference of the double (a value at a rounding tie), the
    logged number is within half a unit of its last digit plus 1e-12 relative."""
    if logged == f"{exact:.6E}":
        return True
    mant, exp = logged.split("E")
    unit = 10.0 ** (int(exp) - 6)
    return abs(float(logged) - exact) <= 0.5 * unit + 1e-12 * abs(exact)


def check(log, s, gbs):
    seen, ok, wrong = {}, True, 0
    pat = re.compile(r"\biteration +(\d+)/ *(\d+) \|.*? learning rate: ([0-9.E+-]+) \|")
    for line in open(log):
        m = pat.search(line)
        if not m:
            continue
        it, total, logged = int(m[1]), int(m[2]), m[3]
        if total != s.train_iters:
            print(f"FAILED: iteration {it}/{total}: Megatron trains {s.train_iters} iterations")
            ok = False
        if it in seen:
            print(f"FAILED: iteration {it} logged twice")
            ok = False
        exact = s.lr(it * gbs)
        seen[it] = logged
        if not printed_ok(logged, exact):
            wrong += 1
            if wrong <= 5:  # the first few; the count after
                print(f"FAILED: iteration {it} ({it * gbs} samples): logged {logged}, "
                      f"Megatron {exact:.6E} ({exact!r})")
            ok = False
    if wrong > 5:
        print(f"FAILED: {log}: {wrong} iterations' learning rates differ in all")
    missing = [i for i in range(1, s.train_iters + 1) if i not in seen]
    if missing:
        print(f"FAILED: {log}: no learning rate logged at iterations {missing[:10]}")
        ok = False
    if ok:
        print(f"{log}: {len(seen)} learning rates as Megatron's (warmup {s.warmup!r} of "
              f"{s.decay} samples, {s.style})")
    return ok


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("check", "table"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "table":
        a = parse_flags(sys.argv[2:])
        s = Schedule(a)
        for it in range(1, s.train_iters + 1):
            n = it * a.global_batch_size
            print(f"{it:6d} {n:8d} {s.lr(n):.6E}")
        return 0
    log = sys.argv[2]
    a = parse_flags(sys.argv[3:])
    return 0 if check(log, Schedule(a), a.global_batch_size) else 1


if __name__ == "__main__":
    sys.exit(main())
