/*
 * The static CUDA runtime links and answers. Without a GPU or driver (this
 * machine) cudaGetDeviceCount fails or reports 0: the test says
 * "SKIPPED: no cuda device: <reason>" and ends as skipped (tests/lib/skip.h).
 * Exit 1 on a real failure.
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "tests/lib/skip.h"

int main(void)
{
    int runtime = 0;
    int driver = -1;
    int count = -1;
    cudaError_t err;

    err = cudaRuntimeGetVersion(&runtime);
    if (err != cudaSuccess) {
        printf("FAIL: cudaRuntimeGetVersion: %s\n", cudaGetErrorString(err));
        return 1;
    }
    /* The linked cudart is the one the headers describe. */
    if (runtime != CUDART_VERSION) {
        printf("FAIL: cudart %d, headers say %d\n", runtime, CUDART_VERSION);
        return 1;
    }
    err = cudaDriverGetVersion(&driver);
    if (err != cudaSuccess || driver < 0) {
        printf("FAIL: cudaDriverGetVersion: %s\n", cudaGetErrorString(err));
        return 1;
    }
    printf("cudart %d, driver %d\n", runtime, driver);

    err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        const char *reason = cudaGetErrorString(err);
        if (reason == NULL || reason[0] == '\0' || cudaGetErrorName(err) == NULL) {
            printf("FAIL: error %d without a description\n", (int)err);
            return 1;
        }
        ps_test_skip("no cuda device: %s (%s)", reason, cudaGetErrorName(err));
    }
    if (count == 0) {
        ps_test_skip("no cuda device: the driver reports 0 devices");
    }
    for (int i = 0; i < count; ++i) {
        struct cudaDeviceProp prop;
        err = cudaGetDeviceProperties(&prop, i);
        if (err != cudaSuccess) {
            printf("FAIL: cudaGetDeviceProperties(%d): %s\n", i, cudaGetErrorString(err));
            return 1;
        }
        printf("device %d: %s, compute %d.%d\n", i, prop.name, prop.major, prop.minor);
    }
    return 0;
}
