/*
 * commands.c: the table of commands beyond info and make-model (load, check, probe, demo, cat).
 */
#include "cli.h"

const cli_command cli_commands[] = {
    {NULL, NULL},
};
