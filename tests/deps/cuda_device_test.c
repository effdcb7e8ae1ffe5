/*
 * Needs a GPU (tag requires-gpu): device memory round trip through the
 * static CUDA runtime. Without a device it says SKIPPED and passes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "tests/lib/skip.h"

#define LEN (1u << 20)

int main(void)
{
    unsigned char *src = malloc(LEN);
    unsigned char *back = malloc(LEN);
    void *dev = NULL;
    int count = 0;
    int rc = 1;
    cudaError_t err;

    if (src == NULL || back == NULL) {
        printf("FAIL: out of host memory\n");
        goto out;
    }
    err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        free(src);
        free(back);
        ps_test_skip("no cuda device: %s",
                     err != cudaSuccess ? cudaGetErrorString(err) : "the driver reports 0 devices");
    }
    for (unsigned i = 0; i < LEN; ++i) {
        src[i] = (unsigned char)(i * 17 + 5);
    }
    memset(back, 0, LEN);
    if ((err = cudaMalloc(&dev, LEN)) != cudaSuccess ||
        (err = cudaMemcpy(dev, src, LEN, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (err = cudaMemcpy(back, dev, LEN, cudaMemcpyDeviceToHost)) != cudaSuccess) {
        printf("FAIL: %s\n", cudaGetErrorString(err));
        goto out;
    }
    if (memcmp(src, back, LEN) != 0) {
        printf("FAIL: device round trip changed the data\n");
        goto out;
    }
    printf("device round trip of %u bytes ok\n", LEN);
    rc = 0;
out:
    if (dev != NULL && cudaFree(dev) != cudaSuccess) {
        printf("FAIL: cudaFree\n");
        rc = 1;
    }
    free(back);
    free(src);
    return rc;
}
