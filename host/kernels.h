/* The OpenCL C sources embedded at build time (generated clattn_kernels.c). */
#ifndef CLATTN_KERNELS_H
#define CLATTN_KERNELS_H

typedef struct clattn_kernel_source {
    const char *name;   /* file name, e.g. "fused.cl"; NULL ends the table */
    const char *source; /* NUL-terminated OpenCL C */
} clattn_kernel_source;

extern const clattn_kernel_source clattn_kernel_sources[];

#endif
