#!/usr/bin/python3
"""A NumPy transcription of Megatron-LM's data path, to check megadlm against.

Transcribed from Megatron-LM (megatron/core/datasets/indexed_dataset.py, gpt_dataset.py,
helpers.cpp, blended_dataset.py, blended_megatron_dataset_builder.py,
blended_megatron_dataset_config.py, utils.py and tools/preprocess_data.py), keeping their
names and their use of numpy.random.RandomState. It does not look at megadlm's C code.

Run with Debian's /usr/bin/python3 (needs numpy only):

  write PREFIX DTYPE SEED NDOCS      write an indexed dataset as Megatron's
                                      IndexedDatasetBuilder does; print it as text
  read PREFIX                         read an indexed dataset as Megatron's _IndexReader
                                      does; print it as text (same format as
                                      dump_gpt_indices read)
  preprocess INPUT.jsonl OUT_PREFIX [--append-eod] [--json-keys K ...]
                                      tools/preprocess_data.py with a ByteLevel tokenizer
                                      (ids = UTF-8 bytes, eod 256, vocab 257)
  check-decode PREFIX INPUT.jsonl KEY EOD
                                      every document of PREFIX decodes (bytes, eod dropped)
                                      to the KEY text of the matching line
  indices DUMPDIR SPLIT SEQ SEED N0,N1,N2 plain|weighted ARGS...
                                      build Megatron's splits/blends and compare every
                                      index and the first samples with megadlm's dump
  cache-check CACHEDIR PREFIX SPLIT SEQ SEED N0,N1,N2
                                      numpy.load the .npy files --data-cache-path wrote for
                                      one prefix and compare them with Megatron's indices
  train-check LOG CACHEDIR SEQ SEED N0,N1,N2 data SPLIT WORD...
  train-check LOG CACHEDIR SEQ SEED N0,N1,N2 per-split "TRAIN WORDS" "VALID WORDS" "TEST WORDS"
                                      read the words as get_blend_from_list does, build
                                      Megatron's splits (blend or blend_per_split) and compare
                                      a `megadlm train --data-cache-path` run: its logged blend
                                      sizes, weights and per-dataset samples, and every cached
                                      GPTDataset index
"""
import json
import math
import os
import re
import struct
import sys

import numpy

_INDEX_HEADER = b"MMIDIDX\x00\x00"

DTYPES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
          6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}
CODES = {v: k for k, v in DTYPES.items()}


# ---------------------------------------------------------------- indexed_dataset.py

def optimal_dtype(cardinality):
    if cardinality is not None and cardinality < 65500:
        return numpy.uint16
    return numpy.int32


class IndexedDatasetBuilder:
    """IndexedDatasetBuilder + _IndexWriter."""

    def __init__(self, bin_path, dtype=numpy.int32):
        self.data_file = open(bin_path, "wb")
        self.dtype = dtype
        self.sequence_lengths = []
        self.document_indices = [0]

    def add_item(self, tokens):
        np_array = numpy.array(tokens, dtype=self.dtype)
        self.data_file.write(np_array.tobytes(order="C"))
        self.sequence_lengths.append(np_array.size)

    def add_document(self, tokens, lengths):
        np_array = numpy.array(tokens, dtype=self.dtype)
        self.data_file.write(np_array.tobytes(order="C"))
        self.sequence_lengths.extend(lengths)
        self.document_indices.append(len(self.sequence_lengths))

    def end_document(self):
        self.document_indices.append(len(self.sequence_lengths))

    def finalize(self, idx_path):
        self.data_file.close()
        with open(idx_path, "wb") as w:
            w.write(_INDEX_HEADER)
            w.write(struct.pack("<Q", 1))
            w.write(struct.pack("<B", CODES[self.dtype]))
            itemsize = numpy.int64(numpy.dtype(self.dtype).itemsize)
            curr_ptr = numpy.int64(0)
            pointers = []
            for length in self.sequence_lengths:
                pointers.append(curr_ptr.item())
                curr_ptr += length * itemsize
            w.write(struct.pack("<Q", len(self.sequence_lengths)))
            w.write(struct.pack("<Q", len(self.document_indices)))
            w.write(numpy.array(self.sequence_lengths, dtype=numpy.int32).tobytes(order="C"))
            w.write(numpy.array(pointers, dtype=numpy.int64).tobytes(order="C"))
            w.write(numpy.array(self.document_indices, dtype=numpy.int64).tobytes(order="C"))


class IndexedDataset:
    """_IndexReader + _MMapBinReader + IndexedDataset.get."""

    def __init__(self, path_prefix):
        self.prefix = path_prefix
        idx_path, bin_path = path_prefix + ".idx", path_prefix + ".bin"
        with open(idx_path, "rb") as stream:
            header = stream.read(9)
            assert header == _INDEX_HEADER, f"bad header, cannot read: {idx_path}"
            version = struct.unpack("<Q", stream.read(8))[0]
            assert version == 1, f"bad version, cannot read: {idx_path}"
            code = struct.unpack("<B", stream.read(1))[0]
            self.dtype = DTYPES[code]
            self.dtype_code = code
            self.dtype_size = numpy.dtype(self.dtype).itemsize
            self.sequence_count = struct.unpack("<Q", stream.read(8))[0]
            self.document_count = struct.unpack("<Q", stream.read(8))[0]
            offset = stream.tell()
        buf = numpy.memmap(idx_path, mode="r", order="C")
        self.sequence_lengths = numpy.frombuffer(buf, dtype=numpy.int32,
                                                 count=self.sequence_count, offset=offset)
        self.sequence_pointers = numpy.frombuffer(
            buf, dtype=numpy.int64, count=self.sequence_count,
            offset=offset + self.sequence_lengths.nbytes)
        self.document_indices = numpy.frombuffer(
            buf, dtype=numpy.int64, count=self.document_count,
            offset=offset + self.sequence_lengths.nbytes + self.sequence_pointers.nbytes)
        self.bin = numpy.memmap(bin_path, mode="r", order="C") if os.path.getsize(bin_path) \
            else numpy.zeros(0, dtype=numpy.uint8)
        assert self.sequence_lengths.shape[0] == self.document_indices[-1]

    def get(self, idx, offset=0, length=None):
        pointer, seq_len = self.sequence_pointers[idx], self.sequence_lengths[idx]
        if length is None:
            length = seq_len - offset
        pointer += offset * self.dtype_size
        return numpy.frombuffer(self.bin, dtype=self.dtype, count=length, offset=pointer)

    def text(self):
        lines = [f"dtype {self.dtype_code}", f"sequences {self.sequence_count}",
                 f"documents {self.document_count - 1}",
                 "document_indices" + "".join(f" {d}" for d in self.document_indices)]
        for i in range(self.sequence_count):
            toks = self.get(i).astype(numpy.int64) if self.sequence_lengths[i] else []
            lines.append(f"seq {i} {self.sequence_lengths[i]} {self.sequence_pointers[i]}:"
                         + "".join(f" {int(t)}" for t in toks))
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- config / utils

def normalize(weights):
    w = numpy.array(weights, dtype=numpy.float64)
    w_sum = numpy.sum(w)
    return (w / w_sum).tolist()


def parse_and_normalize_split(split):
    split = list(map(float, re.findall(r"[.0-9]+", split)))
    split = split + [0.0 for _ in range(3 - len(split))]
    assert len(split) == 3
    assert all(map(lambda _: _ >= 0.0, split))
    return normalize(split)


def convert_split_vector_to_split_matrix(vector_a):
    import functools
    expansion = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector_a])
    bookends = list(zip(expansion[:-1], expansion[1:]))
    matrix = []
    for a in bookends:
        matrix.append(None if a[1] <= a[0] else (a[0], a[1]))
    return matrix


def get_blend_from_list(words):
    """utils.py get_blend_from_list: the words of --data-path (or a per-split path) as
    (prefixes, weights), weights None when not given. An odd count is prefixes only. An even
    count is read as weight/prefix pairs; when a weight position does not parse as a float,
    every word is a prefix. Megatron tests this with a map iterator that `any` consumes up to
    its first None and `all` only sees the rest: it asserts when a float follows a non-float
    in the weight positions, and takes all words as prefixes when the non-floats come last."""
    if words is None:
        return None
    if len(words) % 2 == 1:
        return [w.strip() for w in words], None
    weights = []
    for word in words[0::2]:
        try:
            weights.append(float(word))
        except ValueError:
            weights.append(None)
    missing = [w is None for w in weights]
    if any(missing):
        first = missing.index(True)
        assert all(missing[first + 1:]), "get_blend_from_list: assert all(is_none)"
        return [w.strip() for w in words], None
    return [w.strip() for w in words[1::2]], weights


# ---------------------------------------------------------------- helpers.cpp

def build_sample_idx(sizes, document_idx, seq_length, num_epochs, tokens_per_epoch,
                     drop_last_partial_sequence=True, add_extra_token_to_sequence=1):
    if drop_last_partial_sequence:
        num_samples = (num_epochs * tokens_per_epoch - add_extra_token_to_sequence) // seq_length
    else:
        num_samples = int(math.ceil(numpy.float32(num_epochs * tokens_per_epoch
                                                  - add_extra_token_to_sequence) / seq_length))
    sample_idx = numpy.zeros((num_samples + 1, 2), dtype=numpy.int64)
    sample_idx_index = 0
    document_idx_index = 0
    doc_offset = 0
    sample_idx[sample_idx_index] = (document_idx_index, doc_offset)
    sample_idx_index += 1
    sizes = [int(x) for x in sizes]  # plain ints: fast loop
    document_idx = [int(x) for x in document_idx]
    while sample_idx_index <= num_samples:
        remaining_seq_length = seq_length + add_extra_token_to_sequence
        while remaining_seq_length != 0:
            document_index = document_idx[document_idx_index]
            document_length = sizes[document_index] - doc_offset
            remaining_seq_length -= document_length
            if remaining_seq_length <= 0:
                doc_offset += remaining_seq_length + document_length - add_extra_token_to_sequence
                remaining_seq_length = 0
            else:
                if document_idx_index == len(document_idx) - 1:
                    assert sample_idx_index == num_samples
                    doc_offset = sizes[document_idx[document_idx_index]] \
                        - add_extra_token_to_sequence
                    break
                document_idx_index += 1
                doc_offset = 0
        sample_idx[sample_idx_index] = (document_idx_index, doc_offset)
        sample_idx_index += 1
    return sample_idx


def build_blending_indices(weights, num_datasets, size):
    dataset_index = numpy.zeros(size, dtype=numpy.int16)
    dataset_sample_index = numpy.zeros(size, dtype=numpy.int64)
    current_samples = [0] * num_datasets
    for sample_idx in range(size):
        sample_idx_double = max(float(sample_idx), 1.0)
        max_error_index = 0
        max_error = weights[0] * sample_idx_double - float(current_samples[0])
        for dataset_idx in range(1, num_datasets):
            error = weights[dataset_idx] * sample_idx_double - float(current_samples[dataset_idx])
            if error > max_error:
                max_error = error
                max_error_index = dataset_idx
        dataset_index[sample_idx] = max_error_index
        dataset_sample_index[sample_idx] = current_samples[max_error_index]
        current_samples[max_error_index] += 1
    return dataset_index, dataset_sample_index


# ---------------------------------------------------------------- gpt_dataset.py

def _build_document_index(documents, num_epochs, numpy_random_state, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        document_index = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        document_index[:] = documents
        document_index = document_index.reshape(-1)
        document_index = document_index.astype(numpy.int32)
        numpy_random_state.shuffle(document_index)
        return document_index
    doc_idx_first = _build_document_index(documents, num_epochs - 1, numpy_random_state, False)
    doc_idx_last = _build_document_index(documents, 1, numpy_random_state, False)
    return numpy.concatenate((doc_idx_first, doc_idx_last))


def _build_shuffle_index(num_samples, total_size, numpy_random_state):
    dtype_ = numpy.uint32
    if total_size >= (numpy.iinfo(numpy.uint32).max - 1):
        dtype_ = numpy.int64
    shuffle_idx_first = numpy.arange(start=0, stop=num_samples, step=1, dtype=dtype_)
    numpy_random_state.shuffle(shuffle_idx_first)
    if num_samples == total_size:
        return shuffle_idx_first
    shuffle_idx_last = numpy.arange(start=num_samples, stop=total_size, step=1, dtype=dtype_)
    numpy_random_state.shuffle(shuffle_idx_last)
    return numpy.concatenate((shuffle_idx_first, shuffle_idx_last))


class GPTDataset:
    add_extra_token_to_sequence = 1

    def __init__(self, dataset, indices, num_samples, seq_length, seed):
        self.dataset, self.indices, self.num_samples = dataset, indices, num_samples
        self.sequence_length, self.random_seed = seq_length, seed
        self.document_index, self.sample_index, self.shuffle_index = \
            self._build_document_sample_shuffle_indices()

    def _build_document_sample_shuffle_indices(self):
        sequence_length = self.sequence_length
        num_tokens_per_epoch = int(numpy.sum(self.dataset.sequence_lengths[self.indices]))
        num_epochs = self._get_num_epochs(num_tokens_per_epoch)
        if num_epochs == 1:
            separate_final_epoch = False
        else:
            num_samples_sans_final_epoch = (
                (num_epochs - 1) * num_tokens_per_epoch - self.add_extra_token_to_sequence
            ) // sequence_length
            num_samples_from_final_epoch = self.num_samples - num_samples_sans_final_epoch
            num_samples_per_epoch = (
                num_tokens_per_epoch - self.add_extra_token_to_sequence) // sequence_length
            assert num_samples_from_final_epoch >= 0
            assert num_samples_from_final_epoch <= num_samples_per_epoch + 1
            threshold = 0.80
            separate_final_epoch = num_samples_from_final_epoch < int(
                threshold * num_samples_per_epoch)
        self.num_epochs, self.separate_final_epoch = num_epochs, separate_final_epoch
        numpy_random_state = numpy.random.RandomState(self.random_seed)
        document_index = _build_document_index(self.indices, num_epochs, numpy_random_state,
                                               separate_final_epoch)
        sample_index = build_sample_idx(self.dataset.sequence_lengths, document_index,
                                        sequence_length, num_epochs, num_tokens_per_epoch, True,
                                        self.add_extra_token_to_sequence)
        if separate_final_epoch:
            shuffle_index = _build_shuffle_index(num_samples_sans_final_epoch,
                                                 sample_index.shape[0] - 1, numpy_random_state)
        else:
            shuffle_index = _build_shuffle_index(sample_index.shape[0] - 1,
                                                 sample_index.shape[0] - 1, numpy_random_state)
        return document_index, sample_index, shuffle_index

    def _get_num_epochs(self, num_tokens_per_epoch):
        num_epochs = 1
        num_tokens = num_tokens_per_epoch
        if self.num_samples is None:
            return num_epochs
        num_tokens_requested = (self.num_samples * self.sequence_length) \
            + self.add_extra_token_to_sequence
        while num_tokens < num_tokens_requested:
            num_epochs += 1
            num_tokens += num_tokens_per_epoch
        return num_epochs

    def __len__(self):
        return self.sample_index.shape[0] - 1

    def __getitem__(self, idx):
        """_query_document_sample_shuffle_indices: the seq_length + 1 tokens of sample idx."""
        idx = self.shuffle_index[idx]
        doc_index_beg, doc_index_beg_offset = self.sample_index[idx]
        doc_index_end, doc_index_end_offset = self.sample_index[idx + 1]
        sample_parts = []
        if doc_index_beg == doc_index_end:
            sample_parts.append(self.dataset.get(
                self.document_index[doc_index_beg], offset=doc_index_beg_offset,
                length=doc_index_end_offset - doc_index_beg_offset
                + self.add_extra_token_to_sequence))
        else:
            for i in range(doc_index_beg, doc_index_end + 1):
                offset = 0 if i > doc_index_beg else doc_index_beg_offset
                length = None if i < doc_index_end \
                    else doc_index_end_offset + self.add_extra_token_to_sequence
                sample_parts.append(self.dataset.get(self.document_index[i], offset=offset,
                                                     length=length))
        return numpy.concatenate(sample_parts).astype(numpy.int64)


class BlendedDataset:
    def __init__(self, datasets, weights, size):
        assert len(datasets) == len(weights) and len(datasets) < 32767
        assert all(w > 0 for w in weights), f"BlendedDataset: a weight is not positive: {weights}"
        weights = normalize(weights)  # "Redundant normalization for bitwise identical comparison"
        self.datasets, self.weights, self.size = datasets, weights, size
        self.dataset_index, self.dataset_sample_index = build_blending_indices(
            weights, len(datasets), size)

    def __len__(self):
        return self.size

    def __getitem__(self, idx):
        return self.datasets[self.dataset_index[idx]][self.dataset_sample_index[idx]]


# ---------------------------------------------------------------- blended_megatron_dataset_builder.py

def _get_size_per_split_per_dataset(normalized_weights, target_size_per_split):
    assert numpy.isclose(sum(normalized_weights), 1.0)
    return [[int(math.ceil(target_size * weight * 1.005)) for target_size in target_size_per_split]
            for weight in normalized_weights]


def build_megatron_dataset_splits(prefix, split, sizes, seq_length, seed, wanted):
    dataset = IndexedDataset(prefix)
    num_elements = dataset.sequence_lengths.shape[0]
    out = []
    for i in range(3):
        # megadlm convention (gpt_data.h): a split the trainer asks 0 samples of is not built
        if split[i] is None or not wanted[i]:
            out.append(None)
            continue
        beg = int(round(split[i][0] * float(num_elements)))
        end = int(round(split[i][1] * float(num_elements)))
        indexed_indices = numpy.arange(start=beg, stop=end, step=1, dtype=numpy.int32)
        ds = GPTDataset(dataset, indexed_indices, sizes[i], seq_length, seed)
        ds.range = (beg, end)
        out.append(ds)
    return out


def build(prefixes, weights, split_str, sizes, seq_length, seed):
    """_build_blended_dataset_splits for config.blend = (prefixes, weights)."""
    split = convert_split_vector_to_split_matrix(parse_and_normalize_split(split_str))
    if weights is not None:
        weights = normalize(weights)
    wanted = [n > 0 for n in sizes]
    if len(prefixes) == 1 and weights is None:
        return [(d, [d] if d is not None else []) for d in
                build_megatron_dataset_splits(prefixes[0], split, sizes, seq_length, seed, wanted)]
    if weights is None:
        sizes_per_dataset = [[None for _ in range(3)] for _ in prefixes]  # one epoch each
    else:
        sizes_per_dataset = _get_size_per_split_per_dataset(weights, sizes)
    per_prefix = [build_megatron_dataset_splits(p, split, sizes_per_dataset[k], seq_length, seed,
                                                wanted)
                  for k, p in enumerate(prefixes)]
    result = []
    for i in range(3):
        if split[i] is None or sizes[i] == 0:
            result.append((None, []))
            continue
        mids = [per_prefix[k][i] for k in range(len(prefixes))]
        if weights is not None:
            size_i = sum(list(zip(*sizes_per_dataset))[i])
            weights_i = weights
        else:
            weights_i = [len(m) for m in mids]
            size_i = min(sizes[i], sum(weights_i))
        result.append((BlendedDataset(mids, weights_i, size_i), mids))
    return result


def build_per_split(blends, sizes, seq_length, seed):
    """_build_blended_dataset_splits for config.blend_per_split (--train-data-path,
    --valid-data-path, --test-data-path): split i reads all the documents of its own datasets
    (the split vector spoofed to (0, 1) for i alone). One prefix is a GPTDataset even with a
    weight; several without weights are blended by their lengths, one epoch each."""
    result = []
    for i in range(3):
        if blends[i] is None or sizes[i] == 0:  # megadlm: a split of 0 samples is not built
            result.append((None, []))
            continue
        split_spoof = [None, None, None]
        split_spoof[i] = (0.0, 1.0)
        sizes_spoof = [0, 0, 0]
        sizes_spoof[i] = sizes[i]
        wanted = [j == i for j in range(3)]
        prefixes, weights = blends[i]
        if weights is not None:
            weights = normalize(weights)
        if len(prefixes) == 1:
            d = build_megatron_dataset_splits(prefixes[0], split_spoof, sizes_spoof, seq_length,
                                              seed, wanted)[i]
            result.append((d, [d]))
            continue
        if weights is None:
            sizes_per_dataset = [[None for _ in range(3)] for _ in prefixes]
        else:
            sizes_per_dataset = _get_size_per_split_per_dataset(weights, sizes_spoof)
        mids = [build_megatron_dataset_splits(p, split_spoof, sizes_per_dataset[k], seq_length,
                                              seed, wanted)[i]
                for k, p in enumerate(prefixes)]
        if weights is not None:
            size = sum(list(zip(*sizes_per_dataset))[i])
        else:
            weights = [len(m) for m in mids]
            size = min(sizes[i], sum(weights))
        result.append((BlendedDataset(mids, weights, size), mids))
    return result


# ---------------------------------------------------------------- preprocess_data.py

def preprocess(input_path, output_prefix, json_keys, append_eod):
    eod, vocab_size = 256, 257  # ByteLevel
    builders = {}
    for key in json_keys:
        builders[key] = IndexedDatasetBuilder(f"{output_prefix}_{key}_document.bin",
                                              dtype=optimal_dtype(vocab_size))
    with open(input_path, "r", encoding="utf-8") as fin:
        for json_line in fin:
            data = json.loads(json_line)
            for key in json_keys:
                text = data[key]
                sentences = text if isinstance(text, list) else [text]
                doc_ids, sentence_lens = [], []
                for sentence in sentences:
                    sentence_ids = list(sentence.encode("utf-8"))
                    if len(sentence_ids) > 0:
                        doc_ids.extend(sentence_ids)
                        sentence_lens.append(len(sentence_ids))
                if len(doc_ids) > 0 and append_eod:
                    doc_ids.append(eod)
                    sentence_lens[-1] += 1
                builders[key].add_document(doc_ids, sentence_lens)
    for key in json_keys:
        builders[key].finalize(f"{output_prefix}_{key}_document.idx")


# ---------------------------------------------------------------- commands

def cmd_write(prefix, dtype_name, seed, ndocs):
    dtype = getattr(numpy, dtype_name)
    rs = numpy.random.RandomState(seed)
    if numpy.issubdtype(dtype, numpy.integer):
        lo, hi = max(numpy.iinfo(dtype).min, -2**31), min(numpy.iinfo(dtype).max, 2**31 - 1)
    else:
        lo, hi = -2**20, 2**20
    b = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    for d in range(ndocs):
        if d % 11 == 5:
            b.end_document()  # an empty document: no sequence
            continue
        nseq = 1 + (d % 3 == 0)  # some documents of two sequences
        lens, toks = [], []
        for _ in range(nseq):
            n = int(rs.randint(0, 60)) if d % 13 else 0
            toks.extend(int(x) for x in rs.randint(lo, hi, size=n, dtype=numpy.int64))
            lens.append(n)
        b.add_document(toks, lens)
    b.finalize(prefix + ".idx")
    sys.stdout.write(IndexedDataset(prefix).text())


def cmd_check_decode(prefix, input_path, key, eod):
    ds = IndexedDataset(prefix)
    with open(input_path, "r", encoding="utf-8") as f:
        lines = [json.loads(l) for l in f if l.strip()]
    assert len(ds.document_indices) - 1 == len(lines), (len(ds.document_indices) - 1, len(lines))
    for d, obj in enumerate(lines):
        toks = []
        for s in range(ds.document_indices[d], ds.document_indices[d + 1]):
            toks.extend(int(t) for t in ds.get(s))
        text = obj[key] if isinstance(obj[key], str) else "".join(obj[key])
        got = bytes(t for t in toks if t != eod and t < 256).decode("utf-8")
        if got != text:
            print(f"document {d}: decoded {got[:60]!r}, expected {text[:60]!r}")
            return 1
    print(f"check-decode: {len(lines)} documents decode to their text")
    return 0


def load(dumpdir, name, dtype):
    return numpy.fromfile(os.path.join(dumpdir, name), dtype=dtype)


def cmd_indices(args):
    dumpdir, split_str, seq_length, seed, counts, mode = args[:6]
    rest = args[6:]
    seq_length, seed = int(seq_length), int(seed)
    sizes = [int(x) for x in counts.split(",")]
    if mode == "weighted":
        weights = [float(x) for x in rest[0::2]]
        prefixes = rest[1::2]
    else:
        weights, prefixes = None, rest
    splits = build(prefixes, weights, split_str, sizes, seq_length, seed)
    meta = open(os.path.join(dumpdir, "meta.txt")).read().split("\n")
    bad = 0

    def same(what, a, b):
        nonlocal bad
        a, b = numpy.asarray(a), numpy.asarray(b)
        if a.shape != b.shape or not numpy.array_equal(a.astype(numpy.int64), b.astype(numpy.int64)):
            bad += 1
            print(f"MISMATCH {what}: megatron shape {a.shape}, megadlm shape {b.shape}")
            if a.shape == b.shape:
                i = int(numpy.argmax(a.astype(numpy.int64) != b.astype(numpy.int64)))
                print(f"  first difference at flat {i}: {a.reshape(-1)[i]} vs {b.reshape(-1)[i]}")

    for s, (top, mids) in enumerate(splits):
        line = [l for l in meta if l.startswith(f"split {s} ")][0].split()
        size = int(line[5])
        ref_size = 0 if top is None else len(top)
        same(f"split {s} size", [ref_size], [size])
        for k, m in enumerate(mids):
            if m is None:
                continue
            cl = [l for l in meta if l.startswith(f"component {s} {k} ")][0].split()
            same(f"split {s} component {k} range", list(m.range), [int(cl[4]), int(cl[5])])
            same(f"split {s} component {k} epochs/separate",
                 [m.num_epochs, int(m.separate_final_epoch)], [int(cl[7]), int(cl[9])])
            same(f"split {s} component {k} document_index", m.document_index,
                 load(dumpdir, f"s{s}_c{k}_doc.bin", numpy.int32))
            same(f"split {s} component {k} sample_index", m.sample_index,
                 load(dumpdir, f"s{s}_c{k}_sample.bin", numpy.int64).reshape(-1, 2))
            same(f"split {s} component {k} shuffle_index", m.shuffle_index,
                 load(dumpdir, f"s{s}_c{k}_shuffle.bin", numpy.int64))
            print(f"split {s} component {k}: documents [{m.range[0]}, {m.range[1]}), "
                  f"{len(m)} samples, num_epochs={m.num_epochs}, "
                  f"separate_final_epoch={int(m.separate_final_epoch)}")
        if isinstance(top, BlendedDataset):
            same(f"split {s} blend dataset_index", top.dataset_index,
                 load(dumpdir, f"s{s}_blend_ds.bin", numpy.int16))
            same(f"split {s} blend dataset_sample_index", top.dataset_sample_index,
                 load(dumpdir, f"s{s}_blend_si.bin", numpy.int64))
            print(f"split {s}: blend of {len(mids)} datasets, size {len(top)}")
        if top is not None:
            n = min(len(top), 300)
            toks = load(dumpdir, f"s{s}_tokens.bin", numpy.int32).reshape(n, seq_length + 1)
            for i in range(n):
                if isinstance(top, BlendedDataset):
                    # megadlm wraps a sample index past a component's end (Megatron raises)
                    k, j = top.dataset_index[i], top.dataset_sample_index[i]
                    ref = mids[k][j % len(mids[k])]
                else:
                    ref = top[i]
                same(f"split {s} sample {i} tokens", ref, toks[i])
                if bad > 10:
                    break
    print("indices: " + ("MISMATCH" if bad else "all equal"))
    return 1 if bad else 0


def cmd_cache_check(args):
    """The document/sample/shuffle index files of each built split (one set per split in
    CACHEDIR) against GPTDataset's arrays."""
    import glob
    cachedir, prefix, split_str, seq, seed, ns = args[:6]
    sizes = [int(x) for x in ns.split(",")]
    built = build([prefix], None, split_str, sizes, int(seq), int(seed))
    bad = 0
    for i, name in enumerate(["train", "valid", "test"]):
        ds = built[i][0]
        files = {w: glob.glob(os.path.join(cachedir, "*-GPTDataset-%s-%s.npy" % (name, w)))
                 for w in ("document_index", "sample_index", "shuffle_index")}
        if ds is None:
            continue
        for what, ref in (("document_index", ds.document_index),
                          ("sample_index", ds.sample_index),
                          ("shuffle_index", ds.shuffle_index)):
            if len(files[what]) != 1:
                print("FAILED: %s %s: expected one cached file, found %s" % (name, what,
                                                                            files[what]))
                bad = 1
                continue
            got = numpy.load(files[what][0])
            if got.shape != ref.shape or not numpy.array_equal(got, ref):
                print("FAILED: %s %s: %s differs from Megatron's (shape %s vs %s)" % (
                    name, what, files[what][0], got.shape, ref.shape))
                bad = 1
        if not bad:
            print("%s: cached indices equal Megatron's (%d samples)" % (name, len(ds)))
    return bad


def read_blend_log(log_path):
    """megadlm train's blend lines: {split: (size, [(weight, samples, prefix), ...])}."""
    blends, current = {}, None
    head = re.compile(r"^ > (train|valid|test) split: a blend of (\d+) datasets, (\d+) samples")
    row = re.compile(r"^    weight (\S+)  samples (\d+)  (.*)$")
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = head.match(line)
            if m:
                current = []
                blends[m.group(1)] = (int(m.group(3)), current)
                continue
            m = row.match(line)
            if m and current is not None:
                current.append((float(m.group(1)), int(m.group(2)), m.group(3)))
            else:
                current = None
    return blends


def cached_indices(cachedir, split_name, prefix):
    """The .npy indices megadlm's --data-cache-path wrote for one GPTDataset: every
    description.txt of that split naming that dataset path (one, or identical copies)."""
    import glob
    found = []
    for desc in sorted(glob.glob(os.path.join(
            cachedir, "*-GPTDataset-%s-description.txt" % split_name))):
        if ("dataset_path %s\n" % prefix) not in open(desc).read():
            continue
        base = desc[:-len("description.txt")]
        found.append(tuple(numpy.load(base + w + ".npy")
                           for w in ("document_index", "sample_index", "shuffle_index")))
    return found


def cmd_train_check(args):
    """A `megadlm train` run against Megatron's builder: each blended split's size, weights
    and per-dataset sample counts as the log gives them, and every GPTDataset's indices as
    --data-cache-path wrote them. ARGS: LOG CACHEDIR SEQ SEED N0,N1,N2 then
    `data SPLIT WORD...` (--data-path) or `per-split TRAIN VALID TEST` (each the words of one
    per-split flag in one argument, "" for none)."""
    log_path, cachedir, seq, seed, ns, mode = args[:6]
    seq, seed = int(seq), int(seed)
    sizes = [int(x) for x in ns.split(",")]
    if mode == "data":
        prefixes, weights = get_blend_from_list(args[7:])
        built = build(prefixes, weights, args[6], sizes, seq, seed)
    else:
        blends = [get_blend_from_list(w.split()) if w.strip() else None for w in args[6:9]]
        built = build_per_split(blends, sizes, seq, seed)
    logged = read_blend_log(log_path)
    bad = 0

    def fail(msg):
        nonlocal bad
        bad += 1
        print("MISMATCH " + msg)

    for s, (name, (top, mids)) in enumerate(zip(("train", "valid", "test"), built)):
        if isinstance(top, BlendedDataset):
            if name not in logged:
                fail("%s: Megatron blends %d datasets, megadlm's log has no blend" % (
                    name, len(mids)))
                continue
            size, rows = logged[name]
            ref_rows = [(w, len(m), m.dataset.prefix) for w, m in zip(top.weights, mids)]
            if size != len(top):
                fail("%s: blend size %d, Megatron's %d" % (name, size, len(top)))
            if [(n, p) for _, n, p in rows] != [(n, p) for _, n, p in ref_rows]:
                fail("%s: per-dataset samples %s, Megatron's %s" % (
                    name, [(n, p) for _, n, p in rows], [(n, p) for _, n, p in ref_rows]))
            elif any(abs(w - r[0]) > 1e-11 for (w, _, _), r in zip(rows, ref_rows)):
                fail("%s: weights %s, Megatron's %s" % (
                    name, [w for w, _, _ in rows], [r[0] for r in ref_rows]))
            print("%s: blend of %d datasets, %d samples, weights %s (samples %s)" % (
                name, len(mids), len(top), " ".join("%.6f" % r[0] for r in ref_rows),
                " ".join(str(r[1]) for r in ref_rows)))
        elif name in logged:
            fail("%s: megadlm logs a blend where Megatron builds %s" % (
                name, "nothing" if top is None else "one GPTDataset"))
        for m in mids:
            if m is None:
                continue
            got = cached_indices(cachedir, name, m.dataset.prefix)
            if not got:
                fail("%s: no cached indices of %s" % (name, m.dataset.prefix))
            for arrays in got:
                for what, a, ref in zip(("document", "sample", "shuffle"), arrays,
                                        (m.document_index, m.sample_index, m.shuffle_index)):
                    if a.shape != ref.shape or not numpy.array_equal(a, ref):
                        fail("%s: the cached %s index of %s differs from Megatron's "
                             "(shape %s vs %s)" % (name, what, m.dataset.prefix, a.shape,
                                                   ref.shape))
    print("train-check: " + ("MISMATCH" if bad else "all equal"))
    return 1 if bad else 0


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "write":
        cmd_write(argv[2], argv[3], int(argv[4]), int(argv[5]))
        return 0
    if cmd == "read":
        sys.stdout.write(IndexedDataset(argv[2]).text())
        return 0
    if cmd == "preprocess":
        keys = ["text"]
        if "--json-keys" in argv:
            keys = []
            for a in argv[argv.index("--json-keys") + 1:]:
                if a.startswith("--"):
                    break
                keys.append(a)
        preprocess(argv[2], argv[3], keys, "--append-eod" in argv)
        return 0
    if cmd == "check-decode":
        return cmd_check_decode(argv[2], argv[3], argv[4], int(argv[5]))
    if cmd == "indices":
        return cmd_indices(argv[2:])
    if cmd == "cache-check":
        return cmd_cache_check(argv[2:])
    if cmd == "train-check":
        return cmd_train_check(argv[2:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
