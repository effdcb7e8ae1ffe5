#include "tests/fuzz/corpus_file.h"

#include <stdio.h>

int fuzz_corpus_write(const char *dir, const char *name, const void *prefix, size_t prefix_len,
                      const void *bytes, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    int bad = (prefix_len > 0 && fwrite(prefix, 1, prefix_len, f) != prefix_len) ||
              (len > 0 && fwrite(bytes, 1, len, f) != len);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "%s: write failed\n", path);
        return 1;
    }
    return 0;
}
