/* Compile-only check (built by tests/CMakeLists.txt without the build tree's
 * CL_TARGET_OPENCL_VERSION): including clattn.h must not narrow the includer's OpenCL
 * API, so a 2.0 call declared by <CL/cl.h> stays usable after it (an integrator's
 * report: the header used to pin the translation unit to OpenCL 1.2). */
#include <clattn.h>

#if CL_TARGET_OPENCL_VERSION < 200
#error "clattn.h narrowed CL_TARGET_OPENCL_VERSION below 200"
#endif

cl_command_queue header_cl_version_queue(cl_context c, cl_device_id d)
{
    cl_int err;
    return clCreateCommandQueueWithProperties(c, d, NULL, &err);
}
