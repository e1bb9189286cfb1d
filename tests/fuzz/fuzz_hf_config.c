/* Fuzz target: the Hugging Face config.json reader of `megadlm convert --from hf IN OUT`
 * (model_type, the sizes, the features megadlm refuses, then the megadlm arguments built from
 * them and args_validate). Input: IN/config.json; IN has no model.safetensors, so the command
 * stops at opening it when the config is accepted, before any model is allocated. The command
 * reports on stderr (fuzz.sh runs libFuzzer with -close_fd_mask=2). */
#include "fuzz/fuzz_util.h"

#include "tools/tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char in[PATH_MAX], out[PATH_MAX], cfg[PATH_MAX];
    if (!in[0]) {
        fuzz_mkdir(fuzz_path(in, sizeof in, "hf"));
        fuzz_path(out, sizeof out, "hf-out");
        fuzz_path(cfg, sizeof cfg, "hf/config.json");
    }
    fuzz_write(cfg, data, size);
    char a0[] = "convert", a1[] = "--from", a2[] = "hf";
    char *argv[] = {a0, a1, a2, in, out, NULL};
    int rc = convert_main(5, argv);
    fuzz_note("convert --from hf", rc ? "refused (see above)" : "converted");
    return 0;
}
