/* Packed documents: Megatron's get_ltor_masks_and_position_ids (gpt_dataset.py) and MegaDLMs'
 * packed masked-diffusion batch (pretrain_difflm.py _get_packed_seq_params with the
 * model's update_packing_info_random_shrink and update_packing_info_shift_by_one), as the
 * per-position arrays the kernels read (core/kernels/attention.h: attention_docs).
 *
 * A document ends with its end-of-document token: the token after an eod starts the next one
 * (Megatron: attention_mask[(i + 1):, :(i + 1)] = 0, position_ids[(i + 1):] -= i + 1 - prev). */
#ifndef MEGADLM_CORE_DATASETS_PACKING_H
#define MEGADLM_CORE_DATASETS_PACKING_H

#include <stdint.h>

/* One sequence of T input tokens (autoregressive): position_ids[t] (may be NULL) = t, or with
 * reset_position_ids t minus the start of t's document, plus position_offset; doc_start and
 * doc_end (may be NULL) = the bounds [start, end) of t's document. */
void packing_ltor(const int32_t *tokens, int T, int32_t eod, int reset_position_ids,
                  int position_offset, int32_t *position_ids, int32_t *doc_start,
                  int32_t *doc_end);

/* One masked-diffusion sequence ("no shift": the model sees x[j] = sample[j + 1], j < L, of the
 * R = L + 1 tokens a variable-length draw kept), padded to Lp >= L positions:
 * position_ids[j] (may be NULL) = Megatron's position id of sample token j + 1 (MegaDLMs keeps
 * position_ids[:, 1:]); doc_start, doc_end (may be NULL) = the documents of the R tokens with
 * every boundary moved one to the left (MegaDLMs' shift by one; the first document then starts
 * at 0), cut at L (the random shrink: a document running past the cut ends there). The padding
 * L .. Lp-1 joins the last document (its keys are masked by the kernels' kv_len; its queries
 * are read by nothing) and takes position id 0. */
void packing_difflm(const int32_t *sample, int L, int Lp, int32_t eod, int reset_position_ids,
                    int32_t *position_ids, int32_t *doc_start, int32_t *doc_end);

#endif
