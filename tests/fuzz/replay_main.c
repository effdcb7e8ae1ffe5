/*
 * main() for a libFuzzer target built without libFuzzer: runs
 * LLVMFuzzerTestOneInput once on every file named on the command line, and on
 * every regular file inside a named directory. Each input sits in a buffer of
 * exactly its size so that a sanitizer sees any read past its end.
 *
 *   replay [--min=N] FILE|DIR...   exit 0 when N (default 1) inputs or more ran
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    uint8_t *buf;
    size_t n;

    if (f == NULL || fstat(fileno(f), &st) != 0) {
        fprintf(stderr, "replay: cannot open %s: %m\n", path);
        if (f != NULL)
            fclose(f);
        return -1;
    }
    buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    if (buf == NULL) {
        fprintf(stderr, "replay: %s: out of memory\n", path);
        fclose(f);
        return -1;
    }
    n = fread(buf, 1, (size_t)st.st_size, f);
    fclose(f);
    if (n != (size_t)st.st_size) {
        fprintf(stderr, "replay: short read of %s\n", path);
        free(buf);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

/* Returns the number of inputs run, or -1. */
static long replay_path(const char *path)
{
    struct stat st;
    DIR *dir;
    struct dirent *e;
    long count = 0;

    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: %s: %m\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return replay_file(path) == 0 ? 1 : -1;
    dir = opendir(path);
    if (dir == NULL) {
        fprintf(stderr, "replay: cannot open directory %s: %m\n", path);
        return -1;
    }
    while ((e = readdir(dir)) != NULL) {
        char child[4096];
        struct stat cst;

        if (e->d_name[0] == '.')
            continue;
        snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
        /* stat follows the symlinks of a Bazel runfiles tree. */
        if (stat(child, &cst) != 0 || !S_ISREG(cst.st_mode))
            continue;
        if (replay_file(child) != 0) {
            closedir(dir);
            return -1;
        }
        count++;
    }
    closedir(dir);
    return count;
}

int main(int argc, char **argv)
{
    long total = 0, min = 1;

    for (int i = 1; i < argc; i++) {
        long n;

        if (strncmp(argv[i], "--min=", 6) == 0) {
            min = strtol(argv[i] + 6, NULL, 10);
            continue;
        }
        if (argv[i][0] == '-')
            continue; /* a libFuzzer flag: meaningless here */
        n = replay_path(argv[i]);
        if (n < 0)
            return 1;
        total += n;
    }
    printf("replay: %ld inputs ran without a crash\n", total);
    if (total < min) {
        fprintf(stderr, "replay: expected at least %ld inputs\n", min);
        return 1;
    }
    return 0;
}
