/*
 * clattn — command-line front end of the clattn library: the subcommands, one file
 * each, dispatched from here.
 *
 *   clattn devices   list OpenCL platforms and devices with their limits (devices.c)
 *   clattn demo      run two worked examples and compare with the CPU reference (demo.c)
 *   clattn run       attention on .npy files (run.c, run_args.c)
 *   clattn bench     time attention over a list of shapes (bench.c)
 *   clattn tune      search the kernels' blocking for a device (tune.c)
 *   clattn heatmap   draw the attention weights of one head as SVG (heatmap.c, svg.c)
 *
 * Exit status: 0 success, 1 failure (bad file, library error, failed check),
 * 2 usage error. A failing `run` writes no output file.
 */
#include "clattn.h"
#include "cli.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char program_usage[] =
    "Usage: clattn <command> [options]\n"
    "\n"
    "Scaled dot-product attention O = softmax(scale*Q*K^T + mask)*V on OpenCL devices.\n"
    "\n"
    "Commands:\n"
    "  devices   list OpenCL platforms and devices (\"P:D\") with their limits\n"
    "  demo      run two worked examples on a device and compare with the CPU reference\n"
    "  run       compute attention on .npy files\n"
    "  bench     time attention on device buffers over a list of shapes\n"
    "  tune      search the kernels' blocking on a device and store the best for it\n"
    "  heatmap   draw the attention weights of one head as an SVG heatmap\n"
    "\n"
    "Options:\n"
    "  -h, --help   show this help; `clattn <command> --help` describes a command\n"
    "  --version    print the library version\n"
    "\n"
    "Environment:\n"
    "  CLATTN_DEVICE      default device: \"P:D\" or a device-name substring\n"
    "  CLATTN_KERNEL_DIR  folder of .cl files to use instead of the built-in kernels\n"
    "  CLATTN_CACHE_DIR   program-binary cache and tuning folder (\"off\" disables it)\n"
    "  CLATTN_TUNE        \"off\" ignores the blocking `clattn tune` stored for the device\n"
    "  CLATTN_BLOCKING    RQ,WG,TILE_KV[,NV]: the blocking of every tiled kernel (experiments)\n"
    "  CLATTN_KERNEL_FAMILY    gpu or cpu: force a kernel family (default: by device type)\n"
    "  CLATTN_DECODE_SPLITS    N: key splits of split-KV decoding (0: chosen, 1: none)\n"
    "  CLATTN_DECODE_HEADS     N: KV heads per work-item of decode.cl (0: chosen)\n"
    "  CLATTN_BACKWARD_SPLITS  N: key splits of the backward's dQ on CPUs (0: own kernel)\n"
    "  (read when a context is created; a tuning value that does not parse is ignored)\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 usage error.\n";

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } commands[] = {{"devices", cmd_devices}, {"demo", cmd_demo}, {"run", cmd_run},
                    {"bench", cmd_bench},     {"tune", cmd_tune}, {"heatmap", cmd_heatmap}};

    if (argc < 2) {
        fputs(program_usage, stderr);
        return EXIT_USAGE;
    }
    const char *command = argv[1];
    if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0) {
        fputs(program_usage, stdout);
        return EXIT_SUCCESS;
    }
    if (strcmp(command, "--version") == 0) {
        printf("clattn %s\n", clattn_version());
        return EXIT_SUCCESS;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; ++i) {
        if (strcmp(command, commands[i].name) == 0) {
            cli_set_command(commands[i].name);
            return commands[i].run(argc - 2, argv + 2);
        }
    }
    return usage_error("clattn", command[0] == '-' ? "unknown option '%s'" : "unknown command '%s'",
                       command);
}
