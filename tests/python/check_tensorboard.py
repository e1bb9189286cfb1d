#!/usr/bin/python3
"""Independent reader of the TensorBoard event files megadlm writes (--tensorboard-dir).

Reads the TFRecord framing itself (uint64 length, masked CRC-32C of it, data, masked CRC-32C
of the data) with its own CRC-32C, parses each record as tensorflow.Event with Debian's
python3-protobuf from a descriptor built here with the descriptor API (field numbers of
TensorFlow's event.proto and summary.proto; not megadlm's .proto, not its C code), and checks
the file name, the first event ("brain.Event:2"), the arguments as add_text's text summaries
(Megatron's write_args_to_tensorboard) against the log's arguments block, and every scalar's
(tag, step, value) against the numbers of megadlm's log lines (Megatron's training_log and
evaluate_and_print_results tags).

usage: check_tensorboard.py LOG DIR [--full] [--difflm] [--tb-interval N] [--world-size N]
                            [--no-loss-scale] [--no-world-size] [--start-iteration N]
exit 0 when every check holds; prints what differs otherwise.
"""
import argparse
import math
import os
import re
import socket
import struct
import sys
import time

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# ---- CRC-32C (Castagnoli), bit by bit from its definition -------------------------------
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF

def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF

assert crc32c(b"123456789") == 0xE3069283  # the catalogue's check value

# ---- tensorflow.Event from the descriptor API -------------------------------------------
def event_class():
    F = descriptor_pb2.FieldDescriptorProto
    fp = descriptor_pb2.FileDescriptorProto(name="tb_check_event.proto", package="tbcheck",
                                            syntax="proto3")
    # tensor_shape.proto, tensor.proto (dtype as its enum's number: DT_STRING is 7)
    shape = fp.message_type.add(name="TensorShapeProto")
    dim = shape.nested_type.add(name="Dim")
    dim.field.add(name="size", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    shape.field.add(name="dim", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                    type_name=".tbcheck.TensorShapeProto.Dim")
    tensor = fp.message_type.add(name="TensorProto")
    tensor.field.add(name="dtype", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    tensor.field.add(name="tensor_shape", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                     type_name=".tbcheck.TensorShapeProto")
    tensor.field.add(name="string_val", number=8, type=F.TYPE_BYTES, label=F.LABEL_REPEATED)
    # summary.proto
    meta = fp.message_type.add(name="SummaryMetadata")
    plugin = meta.nested_type.add(name="PluginData")
    plugin.field.add(name="plugin_name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    plugin.field.add(name="content", number=2, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
    meta.field.add(name="plugin_data", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                   type_name=".tbcheck.SummaryMetadata.PluginData")
    summary = fp.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL,
                    oneof_index=0)
    value.field.add(name="tensor", number=8, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tbcheck.TensorProto", oneof_index=0)
    value.field.add(name="metadata", number=9, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tbcheck.SummaryMetadata")
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".tbcheck.Summary.Value")
    ev = fp.message_type.add(name="Event")
    ev.oneof_decl.add(name="what")
    ev.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    ev.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    ev.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL,
                 oneof_index=0)
    ev.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                 type_name=".tbcheck.Summary", oneof_index=0)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fp)
    desc = pool.FindMessageTypeByName("tbcheck.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)

ANY = object()  # a value the log cannot give (any number will do)
failures = []
def fail(msg):
    failures.append(msg)
    print("FAILED:", msg)

def read_records(path, torn_tail_ok):
    """The records' data; a last record cut short (a process killed while writing) is dropped
    when torn_tail_ok, a failure otherwise."""
    data = open(path, "rb").read()
    pos, out = 0, []
    while pos < len(data):
        header = data[pos:pos + 8]
        length = struct.unpack("<Q", header)[0] if len(header) == 8 else 0
        if len(data) - pos < 12 or pos + 16 + length > len(data):
            if torn_tail_ok:
                print(f"{path}: a torn last record of {len(data) - pos} bytes dropped")
            else:
                fail(f"{path}: {len(data) - pos} trailing bytes, not a whole record")
            break
        (hcrc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if hcrc != masked(crc32c(header)):
            fail(f"{path}: record at {pos}: length CRC {hcrc:#x} != {masked(crc32c(header)):#x}")
        body = data[pos + 12:pos + 12 + length]
        (dcrc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if dcrc != masked(crc32c(body)):
            fail(f"{path}: record at {pos}: data CRC {dcrc:#x} != {masked(crc32c(body)):#x}")
        out.append(body)
        pos += 16 + length
    return out

# ---- megadlm's log -----------------------------------------------------------------------
def num(pattern, line):
    m = re.search(pattern, line)
    return float(m.group(1)) if m else None

def parse_log(path):
    iters, evals, samples = [], [], 0
    parse_log.on_the_fly = []  # (iteration, samples, {metric: value}) of --use-on-the-fly-eval
    for line in open(path, errors="replace"):
        if re.match(r" \[[^]]*\] iteration ", line) \
                and "consumed samples" in line and line.rstrip().endswith("|"):  # whole lines
            it = int(re.search(r"iteration +(\d+)/", line).group(1))
            samples = int(num(r"consumed samples: +(\d+)", line))
            iters.append(dict(
                it=it, samples=samples,
                ms=num(r"elapsed time per iteration \(ms\): ([0-9.]+)", line),
                tflops=num(r"throughput per GPU \(TFLOP/s/GPU\): ([0-9.]+)", line),
                lr=num(r"learning rate: ([0-9.E+-]+)", line),
                gbs=num(r"global batch size: +(\d+)", line),
                loss=num(r" lm loss: ([0-9.E+-]+)", line),
                real_len=num(r"real input length: ([0-9.E+-]+)", line),
                scale=num(r"loss scale: ([0-9.]+)", line),
                grad_norm=num(r"grad norm: ([0-9.]+)", line),
                zeros=num(r"num zeros: ([0-9.]+)", line),
                params_norm=num(r"params norm: ([0-9.]+)", line),
                skipped=int(num(r"number of skipped iterations: +(\d+)", line))))
        elif re.match(r" (validation|test) loss at iteration \d+ \|", line):
            it = int(re.search(r"at iteration (\d+)", line).group(1))
            evals.append(dict(it=it, samples=samples,
                              loss=num(r"lm loss value: ([0-9.E+-]+)", line),
                              ppl=num(r"lm loss PPL: ([0-9.E+-]+)", line),
                              real_len=num(r"real input length value: ([0-9.E+-]+)", line),
                              real_ppl=num(r"real input length PPL: ([0-9.E+-]+)", line)))
        elif re.match(r" on-the-fly eval at iteration \d+ \|", line):
            it = int(re.search(r"at iteration (\d+)", line).group(1))
            fields = re.findall(r"\| ([a-z_ ]+): ([0-9.E+-]+)(?: ± [0-9.E+-]+)? (?=\|)", line)
            parse_log.on_the_fly.append((it, samples, {k: float(v) for k, v in fields}))
    return iters, evals

def close(got, want, rel, abs_=0.0):
    return abs(got - want) <= abs_ + rel * abs(want)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("dir")
    ap.add_argument("--full", action="store_true", help="every optional flag was given")
    ap.add_argument("--difflm", action="store_true")
    ap.add_argument("--tb-interval", type=int, default=1)
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--killed", action="store_true",
                    help="the run was killed: the file holds a prefix of what the log says")
    ap.add_argument("--start-iteration", type=int, default=0,
                    help="the iteration the run resumed from (the step of the argument texts)")
    ap.add_argument("--no-world-size", action="store_true",
                    help="--full without --log-world-size-to-tensorboard (MegaDLMs' launch lines)")
    ap.add_argument("--no-loss-scale", action="store_true",
                    help="--no-log-loss-scale-to-tensorboard was given")
    o = ap.parse_args()

    files = sorted(os.listdir(o.dir))
    host = re.escape(socket.gethostname())
    if len(files) != 1 or not re.fullmatch(r"events\.out\.tfevents\.\d{10}\." + host, files[0]):
        fail(f"{o.dir}: expected one events.out.tfevents.<time>.{socket.gethostname()}, "
             f"found {files}")
        if not files:
            return
    Event = event_class()
    records = read_records(os.path.join(o.dir, files[0]), o.killed)
    events = []
    for r in records:
        e = Event()
        e.ParseFromString(r)
        events.append(e)
    if not events or events[0].file_version != "brain.Event:2":
        fail("the first event is not file_version brain.Event:2")
        return
    now = time.time()
    for e in events:
        if not (now - 86400 < e.wall_time <= now + 60):
            fail(f"wall_time {e.wall_time} is not about now")
            break
    got, texts = [], {}  # (tag, step, value) of the scalars in file order; tag -> (step, text)
    for e in events[1:]:
        if e.WhichOneof("what") != "summary" or len(e.summary.value) != 1:
            fail(f"an event that is not one value: {e}")
            continue
        v = e.summary.value[0]
        if v.WhichOneof("value") == "tensor":  # add_text's
            t = v.tensor
            if (v.metadata.plugin_data.plugin_name != "text" or t.dtype != 7 or
                    [d.size for d in t.tensor_shape.dim] != [1] or len(t.string_val) != 1 or
                    not v.tag.endswith("/text_summary")):
                fail(f"{v.tag}: not add_text's text summary: {v}")
            texts[v.tag[:-len("/text_summary")]] = (e.step, t.string_val[0].decode())
        elif v.WhichOneof("value") == "simple_value":
            got.append((v.tag, e.step, v.simple_value))
        else:
            fail(f"{v.tag}: neither a scalar nor a text")
    # Megatron's write_args_to_tensorboard: every argument of the log's arguments block, as
    # str() prints it there, at the starting iteration
    block = re.search(r"-+ arguments -+\n(.*?)\n-+ end of arguments", open(o.log).read(), re.S)
    # (other ranks' lines may come between its lines under mpirun)
    args = dict(m.groups() for m in re.finditer(r"^  (\S+) \.+ (.*)$", block[1], re.M)) \
        if block else {}
    if len(args) < 50:
        fail(f"{o.log}: no arguments block")
    if set(texts) != set(args):
        fail(f"argument texts: missing {sorted(set(args) - set(texts))}, "
             f"extra {sorted(set(texts) - set(args))}")
    for k in set(texts) & set(args):
        if texts[k] != (o.start_iteration, args[k]):
            fail(f"argument {k}: file {texts[k]}, log {args[k]!r} at {o.start_iteration}")

    iters, evals = parse_log(o.log)
    if not iters:
        fail(f"{o.log}: no iteration lines")
        return
    # ---- what Megatron writes, from the log's numbers ---------------------------------
    want = []  # (tag, step, value, rel, abs)
    def pair(tag, value, it, samples, rel, abs_=0.0):
        want.append((tag, it, value, rel, abs_))
        want.append((tag + " vs samples", samples, value, rel, abs_))
    p6 = 1e-6  # %.6E printed, then float32
    for r in iters:
        it, s = r["it"], r["samples"]
        if o.full and (r["zeros"] is None) != (r["grad_norm"] is None):
            fail(f"iteration {it}: num zeros and grad norm not both present or both absent")
        if it % o.tb_interval == 0:
            pair("learning-rate", r["lr"], it, s, p6, 1e-12)
            if r["skipped"] > 0:  # (one iteration per log line in these runs)
                want.append(("skipped-iterations", it, r["skipped"], 0, 0))
            pair("batch-size", r["gbs"], it, s, 0)
            # a skipped iteration's loss is in the file; the line averages over the steps taken
            skipped = r["skipped"] > 0
            pair("lm loss", ANY if skipped else r["loss"], it, s, p6)
            if o.difflm:
                pair("real input length", ANY if skipped else r["real_len"], it, s, p6)
            if not o.no_loss_scale:
                pair("loss-scale", r["scale"], it, s, 0, 0.05)
            if o.full and not o.no_world_size:
                pair("world-size", o.world_size, it, s, 0)
            if r["grad_norm"] is not None:  # none after an overflow
                pair("grad-norm", r["grad_norm"], it, s, 1e-6, 5e-4)
            if o.full:
                if r["zeros"] is not None:
                    pair("num-zeros", r["zeros"], it, s, 0)
                pair("params-norm", r["params_norm"], it, s, 1e-6, 5e-4)
                want.append(("mem-reserved-bytes", it, None, 0, 0))
                want.append(("mem-allocated-bytes", it, None, 0, 0))
                want.append(("mem-allocated-count", it, None, 0, 0))
        if o.full:  # every iteration has a log line in these runs
            want.append(("iteration-time", it, r["ms"] / 1000.0, 1e-6, 5e-5))
            want.append(("throughput", it, r["tflops"], 1e-6, 5e-4))
    for r in evals:
        pair("lm loss validation", r["loss"], r["it"], r["samples"], p6)
        if o.full:
            pair("lm loss validation ppl", r["ppl"], r["it"], r["samples"], p6)
        if o.difflm:
            pair("real input length validation", r["real_len"], r["it"], r["samples"], p6)
            if o.full:
                pair("real input length validation ppl", r["real_ppl"], r["it"], r["samples"], p6)
    # --use-on-the-fly-eval: "on-the-fly eval <metric>" of each of its log lines
    for it, samples, fields in parse_log.on_the_fly:
        for k, v in fields.items():
            pair("on-the-fly eval " + k, v, it, samples, p6)
    for w in want:
        if w[2] is None and not w[0].startswith("mem-"):
            fail(f"the log has no value for {w[0]} at step {w[1]}")
    # ---- compare: the same (tag, step) multiset, values within the log's precision ------
    bykey = {}
    for tag, step, value in got:
        bykey.setdefault((tag, step), []).append(value)
    wantkey = {}
    for w in want:
        wantkey.setdefault((w[0], w[1]), []).append(w)
    if o.killed:  # what was flushed before the kill: the first n iterations, n >= 2
        steps = sorted(step for tag, step, _ in got if tag == "lm loss")
        if len(steps) < 2 or steps != list(range(1, len(steps) + 1)):
            fail(f"killed run: lm loss at steps {steps}, expected 1..n, n >= 2")
        gbs = int(iters[0]["gbs"])
        def after(k, it):  # the key's step is past iteration `it`
            return k[1] > (it * gbs if k[0].endswith(" vs samples") else it)
        last = steps[-1] if steps else 0
        for k in list(wantkey):  # what came after the last flush is not in the file (the
            if k not in bykey and after(k, last - 1):  # last iteration's may be torn)
                del wantkey[k]
        for k in list(bykey):  # a full queue may have flushed an iteration not yet logged
            if k not in wantkey and after(k, iters[-1]["it"]):
                del bykey[k]
    for k in sorted(set(bykey) | set(wantkey), key=str):
        g, w = bykey.get(k, []), wantkey.get(k, [])
        if len(g) != len(w):
            fail(f"{k[0]!r} at step {k[1]}: {len(g)} events written, {len(w)} expected")
            continue
        for gv, (tag, step, wv, rel, abs_) in zip(g, w):
            if wv is ANY:
                ok = True
            elif wv is None:
                ok = gv > 0 and gv == math.floor(gv)
            else:
                ok = close(gv, wv, rel, abs_)
            if not ok:
                fail(f"{tag!r} at step {step}: file {gv!r}, log {wv!r}")
    print(f"{files[0]}: {len(records)} records, CRCs checked; {len(texts)} argument texts, "
          f"{len(got)} scalars, "
          f"{len(set(t for t, _, _ in got))} tags, all equal to the log's numbers"
          if not failures else f"{len(failures)} failures")

if __name__ == "__main__":
    main()
    sys.exit(1 if failures else 0)
