#!/usr/bin/python3
"""Megatron's report_theoretical_memory, transcribed from MegaDLMs' Megatron
(megatron/training/theoretical_memory_usage.py: compute_weight_and_optimizer_memory,
compute_activation_memory, report_theoretical_memory; no MoE), to check the line megadlm
prints as Megatron's own. It does not look at megadlm's code.

  megatron_theoretical_memory.py NAME=VALUE ...

NAME is one of Megatron's argument names (below, with their defaults); true/false for flags,
none for None. Prints the line report_theoretical_memory prints (training's call, with
num_microbatches = global_batch_size / (micro_batch_size x data_parallel_size)).
"""
import math
import sys

NUM_BYTES_IN_MEGABYTE = 1024 * 1024

DEFAULTS = dict(num_layers=None, hidden_size=None, num_attention_heads=None, kv_channels=None,
                ffn_hidden_size=None, group_query_attention=False, num_query_groups=1,
                swiglu=False, padded_vocab_size=None, untie_embeddings_and_output_weights=False,
                tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                virtual_pipeline_model_parallel_size=None, data_parallel_size=1,
                use_distributed_optimizer=False, seq_length=None, micro_batch_size=1,
                global_batch_size=None, sequence_parallel=False, recompute_granularity=None)


class Args:
    def __init__(self, pairs):
        for k, v in DEFAULTS.items():
            setattr(self, k, v)
        for p in pairs:
            k, v = p.split("=", 1)
            assert k in DEFAULTS, "unknown argument " + k
            if v in ("true", "false"):
                v = v == "true"
            elif v == "none":
                v = None
            elif k != "recompute_granularity":
                v = int(v)
            setattr(self, k, v)
        if self.kv_channels is None:
            self.kv_channels = self.hidden_size // self.num_attention_heads
        if self.ffn_hidden_size is None:
            self.ffn_hidden_size = 4 * self.hidden_size
        if self.global_batch_size is None:
            self.global_batch_size = self.micro_batch_size * self.data_parallel_size


def weight_and_optimizer_memory(args):
    query_projection_to_hidden_size_ratio = (
        args.kv_channels * args.num_attention_heads / args.hidden_size)
    num_query_groups = args.num_query_groups if args.group_query_attention \
        else args.num_attention_heads
    gated_linear_multiplier = 3 / 2 if args.swiglu else 1
    in_layers = 2 * args.num_layers * args.hidden_size * args.hidden_size * (
        (1 + num_query_groups / args.num_attention_heads) * query_projection_to_hidden_size_ratio
        + (args.ffn_hidden_size / args.hidden_size) * gated_linear_multiplier
        + 2 / args.hidden_size
        + 1 / (args.num_layers * args.hidden_size))
    embedding_size = args.hidden_size * args.padded_vocab_size
    most_loaded = (in_layers / args.pipeline_model_parallel_size + embedding_size) \
        / args.tensor_model_parallel_size
    if args.untie_embeddings_and_output_weights and args.pipeline_model_parallel_size == 1:
        most_loaded += embedding_size / args.tensor_model_parallel_size
    per_parameter = 18 if not args.use_distributed_optimizer \
        else 6 + 12 / args.data_parallel_size
    return most_loaded * per_parameter


def activation_memory(args, num_microbatches):
    s, b, h = args.seq_length, args.micro_batch_size, args.hidden_size
    p = args.pipeline_model_parallel_size
    act = s * b * h * (18 + 4 * (args.ffn_hidden_size / h)) * args.num_layers
    act += 8 * s * b * p
    act += s * b * h * p
    v = args.virtual_pipeline_model_parallel_size
    if v is not None:
        act *= 1 + (p - 1) / (p * v)
    if v is None and p > 1:
        act *= min(1, num_microbatches / p)
    if p == 1:
        act += s * b * h * 4 * (1 + args.padded_vocab_size / h)
    return act / args.tensor_model_parallel_size


def report(args):
    num_microbatches = args.global_batch_size // (args.micro_batch_size * args.data_parallel_size)
    w = weight_and_optimizer_memory(args) / NUM_BYTES_IN_MEGABYTE
    if not args.sequence_parallel or args.recompute_granularity != "selective":
        return f"Theoretical memory footprints: weight and optimizer={w:.2f} MB"
    a = activation_memory(args, num_microbatches) / NUM_BYTES_IN_MEGABYTE
    return (f"Theoretical memory footprints: weight and optimizer={w:.2f} MB, "
            f"activation={a:.2f} MB, total={w + a:.2f} MB")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    print(report(Args(sys.argv[1:])))
