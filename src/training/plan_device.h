/* Device descriptions for `megadlm plan` (training/plan_cost.h's plan_device): named presets
 * with public figures (docs/PLAN.md cites each), JSON files for custom devices, and this
 * machine calibrated by a short measurement (sgemm rate, memory bandwidth, and the MPI
 * bandwidth and latency between ranks when run under mpirun), saved so later plans reuse it. */
#ifndef MEGADLM_TRAINING_PLAN_DEVICE_H
#define MEGADLM_TRAINING_PLAN_DEVICE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "training/plan_cost.h"

/* The preset called name (case-insensitive: "A100-80GB", "H100-80GB"); 0, or -1 when there is
 * none. */
int plan_device_preset(const char *name, plan_device *d);
/* The presets' names, comma-separated (for messages and --help). */
const char *plan_device_preset_names(void);

/* A description from/to JSON (the keys of docs/PLAN.md: name, flops_bf16, flops_fp32,
 * efficiency, memory_bytes, memory_bandwidth, intra_node_bandwidth, inter_node_bandwidth,
 * latency, ranks_per_node, shared, memory_account, source). Reading: 0, or -1 with a message
 * naming the key and what was expected. */
int plan_device_from_json(const cJSON *o, plan_device *d, char *err, size_t errlen);
cJSON *plan_device_to_json(const plan_device *d);
/* The same through a file (errors name the file). */
int plan_device_load(const char *path, plan_device *d, char *err, size_t errlen);
int plan_device_save(const char *path, const plan_device *d, char *err, size_t errlen);

/* Where this machine's calibration is kept: $XDG_CACHE_HOME/megadlm/device-this-cpu.json, or
 * $HOME/.cache/megadlm/device-this-cpu.json. 0, or -1 when neither variable is set. */
int plan_device_cache_path(char *out, size_t n);

/* Measures this machine (collective over the MPI world when launched by mpirun: every rank
 * calls it; rank 0 and 1 ping-pong). Fills d (account PLAN_ACCOUNT_MEGADLM, shared, one node).
 * Without a second rank the link between ranks is not measured: it is taken as the memory
 * bandwidth's half (a copy through shared memory reads and writes each byte once), and the
 * source says so. */
void plan_device_calibrate(plan_device *d);

#endif
