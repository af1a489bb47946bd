/*
 * commands.c: the table of commands beyond info and make-model (load, check, probe, demo, cat).
 */
#include "cli.h"

const cli_command cli_commands[] = {
    {"load", cmd_load}, {"check", cmd_check}, {"demo", cmd_demo}, {"probe", cmd_probe},
    {"cat", cmd_cat},   {"trace", cmd_trace}, {NULL, NULL},
};
