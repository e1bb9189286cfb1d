#include "core/tensor/tensor.h"

#include <string.h>

int param_set_find(const param_set *ps, const char *name) {
    for (int i = 0; i < ps->count; i++)
        if (strcmp(ps->tensors[i].name, name) == 0) return i;
    return -1;
}
