/* TensorBoard event files (--tensorboard-dir): what torch.utils.tensorboard's SummaryWriter
 * writes for Megatron's writer.add_scalar, in C. A file is a sequence of TFRecords
 *   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
 *   `length` bytes: one tensorflow.Event protobuf | uint32 masked CRC-32C of them
 * whose first Event carries file_version "brain.Event:2" and every later one a Summary with one
 * value at a step: a scalar (tag, simple_value) or a text (add_text's string tensor). The protobufs are encoded by protobuf-c from
 * event.proto (the subset of TensorFlow's event.proto and summary.proto kept beside this file).
 *
 * Events are queued in memory (Megatron's --tensorboard-queue-size: pending events before an
 * add forces a flush) and written with one write() per flush of whole records, so a crash
 * leaves every flushed record readable (at worst a torn last record, which readers drop). */
#ifndef MEGADLM_TRAINING_TENSORBOARD_TENSORBOARD_H
#define MEGADLM_TRAINING_TENSORBOARD_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

typedef struct tb_writer tb_writer;

/* Creates dir (mkdir -p) and in it events.out.tfevents.<unix time, 10 digits>.<hostname> (with
 * ".<pid>" appended when that name exists already: two writers started in the same second),
 * and writes the file_version event. NULL with "<path>: ..." in err on failure. */
tb_writer *tb_writer_open(const char *dir, int queue_size, char *err, size_t errlen);

/* Queues the scalar `value` of series `tag` at `step` (wall time: now); flushes when the
 * queue holds queue_size events. 0, or -1 with the file's error in err. */
int tb_add_scalar(tb_writer *w, const char *tag, double value, int64_t step, char *err,
                  size_t errlen);

/* Queues `text` as torch.utils.tensorboard's add_text(tag, text, step) does: tag
 * "<tag>/text_summary", the text plugin's metadata, a DT_STRING tensor of shape [1]. */
int tb_add_text(tb_writer *w, const char *tag, const char *text, int64_t step, char *err,
                size_t errlen);

/* Writes the queued events. 0, or -1 with "<path>: ..." in err. */
int tb_flush(tb_writer *w, char *err, size_t errlen);

/* Flushes, fsyncs and closes; w is freed even on failure (NULL is fine). 0 or -1 as above. */
int tb_writer_close(tb_writer *w, char *err, size_t errlen);

/* The event file's path. */
const char *tb_writer_path(const tb_writer *w);

#endif
