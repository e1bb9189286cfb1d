/* Fuzz target: the safetensors reader (st_open) as checkpoints and `convert --from hf` use it.
 * Input: a whole .safetensors file. A file st_open accepts is then used as the loaders use it:
 * every entry found by name, every metadata key looked up, the checkpoint loader's per-tensor
 * checks (ckpt_check_entry: dtype, shape, the crc32 metadata), and the first and last elements
 * of every float tensor converted with st_read_f32_range (at most 4096 elements in all). */
#include "fuzz/fuzz_util.h"

#include "core/tensor/safetensors.h"
#include "training/checkpoint_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[PATH_MAX];
    if (!path[0]) fuzz_path(path, sizeof path, "model.safetensors");
    fuzz_write(path, data, size);

    char err[1024];
    st_file f;
    if (st_open(path, &f, err, sizeof err) != 0) {
        fuzz_note("refused", err);
        return 0;
    }
    fuzz_note("accepted", "");
    float out[64];
    size_t budget = 4096;
    double sum = 0;
    for (int i = 0; i < f.count; i++) {
        const st_entry *e = &f.entries[i];
        if (st_find(&f, e->name) != e) abort(); /* names are unique: the lookup finds it */
        const st_entry *got;
        uint32_t crc;
        int has_crc;
        ckpt_check_entry(&f, e->name, e->ndim, e->shape, &got, &crc, &has_crc, err, sizeof err);
        if (e->dtype != ST_F32 && e->dtype != ST_F16 && e->dtype != ST_BF16) continue;
        size_t first[2] = {0, e->numel > 64 ? e->numel - 64 : 0};
        for (int k = 0; k < 2 && budget > 0; k++) {
            size_t n = e->numel - first[k] < 64 ? e->numel - first[k] : 64;
            if (n > budget) n = budget;
            if (st_read_f32_range(&f, e, first[k], n, out, err, sizeof err) == 0)
                for (size_t j = 0; j < n; j++) sum += out[j];
            budget -= n;
        }
    }
    for (int i = 0; i < f.nmeta; i++)
        if (st_metadata(&f, f.meta_keys[i]) == NULL) abort();
    st_close(&f);
    return sum == 42.0 ? 0 : 0;
}
