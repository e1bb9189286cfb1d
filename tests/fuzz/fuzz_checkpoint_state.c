/* Fuzz target: what `--load DIR` reads before any tensor: the tracker file
 * latest_checkpointed_iteration.txt (ckpt_read_latest) and iter_0000001/state.json
 * (ckpt_load_state), then the saved arguments as generate and convert --to hf take them
 * (args_from_json, args_validate; tokenizer file names are cleared so that no file named by
 * the input is opened). Input: the bytes of both files (the same bytes are written to each). */
#include "fuzz/fuzz_util.h"

#include "training/arguments.h"
#include "training/checkpoint_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[PATH_MAX], tracker[PATH_MAX], state[PATH_MAX];
    if (!dir[0]) {
        fuzz_mkdir(fuzz_path(dir, sizeof dir, "ckpt"));
        fuzz_path(tracker, sizeof tracker, "ckpt/latest_checkpointed_iteration.txt");
        fuzz_mkdir(fuzz_path(state, sizeof state, "ckpt/iter_0000001"));
        fuzz_path(state, sizeof state, "ckpt/iter_0000001/state.json");
    }
    fuzz_write(tracker, data, size);
    fuzz_write(state, data, size);

    char err[1024];
    int iteration = -1;
    fuzz_note("tracker", ckpt_read_latest(dir, &iteration, err, sizeof err) ? err : "accepted");

    ckpt_state st;
    if (ckpt_load_state(dir, 1, &st, err, sizeof err) != 0) {
        fuzz_note("state.json refused", err);
        return 0;
    }
    if (st.args) {
        megadlm_args a;
        args_defaults(&a);
        if (args_from_json(&a, st.args, err, sizeof err) == 0) {
            a.vocab_file[0] = a.merge_file[0] = a.tokenizer_model[0] = 0;
            fuzz_note("args_validate", args_validate(&a, err, sizeof err) ? err : "accepted");
        } else {
            fuzz_note("args_from_json refused", err);
        }
        args_free(&a);
    }
    ckpt_state_free(&st);
    return 0;
}
