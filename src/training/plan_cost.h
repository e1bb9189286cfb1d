/* `megadlm plan`'s cost model: for one validated configuration on one device description, the
 * memory of its most loaded rank and the time of one iteration, split into the terms a user
 * needs to see why one layout beats another. Pure arithmetic on validated arguments (no model
 * is built), so the paper's 1T model costs microseconds. docs/PLAN.md writes every term out.
 *
 * Memory is never computed here: it is `megadlm memory`'s figure (training/theoretical_memory.c)
 * in one of its two accounts, chosen by the device:
 *   PLAN_ACCOUNT_MEGATRON  Megatron's report_theoretical_memory (16-bit runs on GPUs: what the
 *                          paper's figures count), the first pipeline stage;
 *   PLAN_ACCOUNT_MEGADLM   what megadlm train allocates (parameters, gradients, optimizer state,
 *                          saved activations: `train --log-memory`'s predicted == measured),
 *                          the largest over the pipeline stages.
 * Both with an MoE model's routing-dependent state at its bound (no routing needs more), and at a
 * balanced routing beside it.
 * FLOPs are the same module's model and hardware FLOPs (appendix A of Korthikanti et al. 2022);
 * an MoE model's MLP slots are priced here (its logged FLOPs are MegaDLMs', wrong for them). */
#ifndef MEGADLM_TRAINING_PLAN_COST_H
#define MEGADLM_TRAINING_PLAN_COST_H

#include "training/arguments.h"

typedef enum { PLAN_ACCOUNT_MEGATRON = 0, PLAN_ACCOUNT_MEGADLM } plan_account;

#define PLAN_GEMM_POINTS 8

/* One device (a rank's share of a machine). Rates in FLOP/s, bandwidths in bytes/s per
 * direction per rank, memory in bytes. */
typedef struct {
    char name[64];
    double flops_bf16;   /* dense 16-bit GEMM peak (bf16 and fp16) */
    double flops_fp32;   /* fp32 GEMM peak */
    double efficiency;   /* sustained share of the peak the model's FLOPs run at */
    double memory_bytes; /* per rank (per node when shared) */
    double memory_bandwidth;
    double intra_bandwidth; /* between ranks of one node (NVLink; shared memory on a CPU) */
    double inter_bandwidth; /* between nodes (InfiniBand) */
    double latency;         /* seconds per message step of a collective or a transfer */
    int ranks_per_node;     /* 0: every rank on one node */
    int shared;             /* 1: flops, memory and memory bandwidth are the node's, shared by
                               the ranks on it (a CPU); 0: each rank's own (a GPU) */
    plan_account account;
    /* Measured GEMM rates by size (this-cpu): the rate of an n x n x n GEMM at gemm_dim[i];
     * a GEMM of M x N x K runs at the rate of n = (M N K)^(1/3), interpolated in log-log.
     * gemm_points 0: flat, the peak x efficiency (the presets). */
    int gemm_points;
    double gemm_dim[PLAN_GEMM_POINTS], gemm_fp32[PLAN_GEMM_POINTS], gemm_bf16[PLAN_GEMM_POINTS];
    /* Work outside the GEMMs (norms, activation functions, softmax, dropout, residuals): bytes
     * of saved activations (megadlm's, kept without recomputation) a rank's share of the node
     * takes through forward and backward per second, measured on megadlm's own kernels
     * (this-cpu); 0: folded into the efficiency, as for the presets */
    double elementwise_bandwidth;
    char source[512]; /* where the numbers come from */
} plan_device;

/* One configuration's cost (seconds per iteration; bytes). */
typedef struct {
    double memory_bytes;  /* most loaded rank, in the device's account; MoE: its layers'
                             routing-dependent state at the bound (no routing exceeds it) */
    double memory_balanced; /* ... with that state at a balanced routing (= memory_bytes when
                               dense) */
    double compute;       /* hardware FLOPs of a rank / (rate x efficiency), + elementwise */
    double elementwise;   /* ... of which memory-bound work outside the GEMMs */
    double gemm_rate;     /* FLOP/s of a rank at this configuration's GEMM shapes */
    double tp_comm;       /* tensor-parallel collectives, exposed part */
    double tp_hidden;     /* ... the part --tp-comm-overlap hides (not in the total) */
    double cp_comm;       /* context-parallel exchange of keys and values, exposed part */
    double cp_hidden;     /* ... the part the p2p ring hides under attention (not in the total) */
    double moe_comm;      /* expert parallelism's token exchange (all-to-all, or the TP x EP
                             group's all-gather and reduce-scatter) */
    double bubble;        /* pipeline bubble: (p - 1) / (v M) of compute + exposed TP, CP, MoE */
    double p2p;           /* pipeline sends between stages */
    double dp_comm;       /* data-parallel gradient reduction (and parameter gather), exposed */
    double dp_hidden;     /* ... the part --overlap-grad-reduce hides (not in the total) */
    double optimizer;     /* Adam's bytes over the memory bandwidth */
    double total;         /* compute + tp_comm + cp_comm + moe_comm + bubble + p2p + dp_comm +
                             optimizer */
    double model_flops;   /* per iteration, whole job (MoE: the router, the experts on the
                             routed rows and the shared expert in place of the dense MLP) */
    double hardware_flops;
    double mfu, hfu;      /* model / hardware FLOPs per second over the job's peak */
    double recomputed_layers; /* layers of a stage whose forward runs again (mean per micro-batch) */
} plan_cost;

/* Ranks that share one node under this device for a world of world_size. */
int plan_ranks_per_node(const plan_device *d, int world_size);

/* Memory of the most loaded rank (bytes) in the given account, the MoE layers' state at its
 * bound; *balanced (if not NULL): the same at a balanced routing. */
double plan_memory_bytes(const megadlm_args *a, plan_account account, double *balanced);

/* Fills *c for validated arguments a on device d. */
void plan_cost_compute(const megadlm_args *a, const plan_device *d, plan_cost *c);

#endif
