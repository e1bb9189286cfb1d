/* MegaDLMs' --debug group (custom_args/difflm.py, training.py's pretrain): --turn-on-debugpy
 * and --detect-anomaly take effect only under --debug. The anomaly check itself lives in the
 * model's backward (core/models/gpt_model.h: detect_anomaly). */
#ifndef MEGADLM_TRAINING_DEBUG_H
#define MEGADLM_TRAINING_DEBUG_H

#include "training/arguments.h"

/* --debug --turn-on-debugpy on world rank 0: MegaDLMs waits for a debugpy client on port
 * 5678; the CPU meaning is to wait for a native debugger: print the PID and block until a
 * tracer is attached and lets it run (Linux: TracerPid in /proc/self/status) or sets
 * megadlm_debugger_go, then go on. The trainer holds
 * the other ranks in a barrier meanwhile (before the watchdog starts counting). */
void debug_wait_for_debugger(const megadlm_args *a, int world_rank);

/* --debug --detect-anomaly: whether backward checks its results (MegaDLMs' warning printed). */
int debug_detect_anomaly(const megadlm_args *a);

#endif
