#!/usr/bin/python3
"""The MoE scalars of megadlm's TensorBoard file (read with check_tensorboard.py's independent
reader), against its log lines: Megatron's track_moe_metrics writes every iteration each
tracked value's mean over all layers (load_balancing_loss, z_loss, ...) and, with
--moe-per-layer-logging, each layer's as moe/<name>_layer_<i>; with --log-interval 1 the log
line shows the same value.

usage: check_moe_tensorboard.py LOG DIR NUM_LAYERS"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_tensorboard as tb  # noqa: E402

log, d, L = sys.argv[1], sys.argv[2], int(sys.argv[3])
Event = tb.event_class()
path = os.path.join(d, sorted(os.listdir(d))[0])
scalars = {}
for rec in tb.read_records(path, False):
    e = Event()
    e.ParseFromString(rec)
    for v in e.summary.value:
        if v.WhichOneof("value") == "simple_value":
            scalars.setdefault(v.tag, {})[e.step] = v.simple_value
bad = 0
names = ["load_balancing_loss", "z_loss"]
for line in open(log):
    m = re.search(r"iteration +(\d+)/", line)
    if not m:
        continue
    it = int(m.group(1))
    for name in names:
        lm = re.search(name + r": ([0-9.E+-]+)", line)
        got = scalars.get(name, {}).get(it)
        if lm is None or got is None:
            print(f"iteration {it}: {name} missing (log {lm is not None}, TensorBoard {got is not None})")
            bad = 1
            continue
        if abs(got - float(lm.group(1))) > 1e-6 * abs(got):
            print(f"iteration {it}: {name} TensorBoard {got} vs log {lm.group(1)}")
            bad = 1
        layers = [scalars.get(f"moe/{name}_layer_{i}", {}).get(it) for i in range(L)]
        if any(x is None for x in layers):
            print(f"iteration {it}: moe/{name}_layer_<i> missing: {layers}")
            bad = 1
        elif abs(sum(layers) / L - got) > 1e-5 * abs(got):
            print(f"iteration {it}: {name} {got} is not the mean of its layers {layers}")
            bad = 1
print(f"MoE TensorBoard scalars: {len([t for t in scalars if 'moe' in t or t in names])} tags, "
      f"{'ok' if not bad else 'FAILED'}")
sys.exit(bad)
