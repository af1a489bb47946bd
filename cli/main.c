/*
 * main.c: the weightmap tool's entry point: dispatch through the command table (commands.c), the
 * top-level usage and every command's --help, both printed from the table. Exit codes: 0
 * success, 1 the file or the run failed (one line on stderr: "weightmap: FILE: what is wrong"),
 * 2 usage error.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- help, from the table ---- */

/* "--cycles N", "--lock[=HOW]", "--json" */
static int option_text(char *buf, size_t cap, const cli_option *o) {
    if (o->kind == CLI_FLAG && !o->value) return snprintf(buf, cap, "--%s", o->name);
    if (o->optional) return snprintf(buf, cap, "--%s[=%s]", o->name, o->value);
    return snprintf(buf, cap, "--%s %s", o->name, o->value);
}

/* The option's help line with its range and default in parentheses. */
static void option_help(char *buf, size_t cap, const cli_option *o) {
    char range[64] = "";
    if (o->kind == CLI_NUM)
        snprintf(range, sizeof range, "%" PRIu64 "..%" PRIu64, o->min, o->max);
    else if (o->kind == CLI_SIZE)
        snprintf(range, sizeof range, "bytes: 4096, 512M, 1G, 2T%s", o->min ? "; not 0" : "");
    int n = snprintf(buf, cap, "%s", o->help);
    if (n < 0 || (size_t)n >= cap) return;
    if (o->required)
        snprintf(buf + n, cap - (size_t)n, " (%s%srequired)", range, *range ? "; " : "");
    else if (*range || o->def)
        snprintf(buf + n, cap - (size_t)n, " (%s%s%s%s)", range, *range && o->def ? "; " : "",
                 o->def ? "default " : "", o->def ? o->def : "");
}

/* Prints text from column `col` (where the cursor is) on, wrapped at 78 columns; continuation
 * lines start at column `indent`. */
static void wrapped(FILE *out, const char *text, int col, int indent) {
    while (*text) {
        size_t w = strcspn(text, " ");
        if (col > indent && col + 1 + (int)w > 78) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', out);
            col++;
        }
        fwrite(text, 1, w, out);
        col += (int)w;
        text += w;
        while (*text == ' ')
            text++;
    }
    fputc('\n', out);
}

#define HELP_COL 30

void cli_help_command(FILE *out, const cli_command *c) {
    bool optional = false;
    const char *args = c->args ? c->args : "";
    fprintf(out, "usage: weightmap %s", c->name);
    if (*args && !c->options_end_at_arg) fprintf(out, " %s", args);
    for (const cli_option *o = c->opts; o && o->name; o++) {
        if (o->absent) continue;
        char t[96];
        option_text(t, sizeof t, o);
        if (o->required) fprintf(out, " %s", t);
        optional = optional || !o->required;
    }
    if (optional) fputs(" [options]", out);
    if (*args && c->options_end_at_arg) fprintf(out, " %s", args);
    fprintf(out, "\n\n%s\n", c->about ? c->about : c->summary);
    if (c->opts && c->opts->name) fputs("\noptions:\n", out);
    for (const cli_option *o = c->opts; o && o->name; o++) {
        if (o->absent) continue;
        char t[96], h[512];
        int n = option_text(t, sizeof t, o) + 2;
        fprintf(out, "  %s", t);
        if (n >= HELP_COL - 1) {
            fputc('\n', out);
            n = 0;
        }
        fprintf(out, "%*s", HELP_COL - n, "");
        option_help(h, sizeof h, o);
        wrapped(out, h, HELP_COL, HELP_COL);
    }
    fprintf(out, "  --help%*sthis text\n", HELP_COL - 8, "");
    fprintf(out, "\nexample:\n  %s\n", c->example);
}

/* One command's line of the usage: its name, arguments and every option, wrapped at 78
 * columns, then its summary. */
static void usage_line(FILE *out, const cli_command *c) {
    const char *args = c->args ? c->args : "";
    bool args_last = c->options_end_at_arg;
    int col =
        fprintf(out, "  %s%s%s", c->name, *args && !args_last ? " " : "", args_last ? "" : args);
    for (const cli_option *o = c->opts; o && o->name; o++) {
        if (o->absent) continue;
        char t[96], w[100];
        option_text(t, sizeof t, o);
        int n = snprintf(w, sizeof w, o->required ? " %s" : " [%s]", t);
        if (col + n > 78) {
            fputs("\n     ", out);
            col = 5;
        }
        fputs(w, out);
        col += n;
    }
    if (*args && args_last) {
        if (col + 1 + (int)strlen(args) > 78) fputs("\n     ", out);
        fprintf(out, " %s", args);
    }
    fprintf(out, "\n      %s\n", c->summary);
}

void cli_help_usage(FILE *out) {
    fputs("usage: weightmap COMMAND [ARGS] [OPTIONS]\n\ncommands:\n", out);
    for (const cli_command *c = cli_commands; c->name; c++)
        usage_line(out, c);
    fputs("\nweightmap COMMAND --help: the command's options, their defaults and ranges, and an\n"
          "example. Options are written --name VALUE or --name=VALUE.\n"
          "weightmap --version: the library's version.\n"
          "\nexit codes: 0 success, 1 the file or the run failed, 2 usage error\n",
          out);
}

/* --help or -h among the command's options (before "--", and for a command whose options end at
 * its first argument, before that), skipping the values of options that take one. */
static bool wants_help(const cli_command *c, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--")) return false;
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) return true;
        if (s[0] != '-' || !s[1]) {
            if (c->options_end_at_arg) return false;
            continue;
        }
        bool next_is_option = i + 1 < argc && !strncmp(argv[i + 1], "--", 2);
        for (const cli_option *o = c->opts; o && o->name; o++)
            if (s[1] == '-' && !strcmp(s + 2, o->name) && o->kind != CLI_FLAG && !o->optional &&
                !next_is_option)
                i++; /* its value (as cli_next takes it: not one that starts with --) */
    }
    return false;
}

/* ---- dispatch ---- */

int main(int argc, char **argv) {
    if (argc < 2) {
        cli_help_usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        const cli_command *c = argc > 2 ? cli_command_find(argv[2]) : NULL;
        if (argc > 2 && !c) return cli_usage("unknown command '%s'", argv[2]);
        if (c)
            cli_help_command(stdout, c);
        else
            cli_help_usage(stdout);
        return 0;
    }
    if (!strcmp(name, "--version")) {
        printf("weightmap %s\n", wm_version());
        return 0;
    }
    const cli_command *c = cli_command_find(name);
    if (!c) return cli_usage("unknown command '%s'", name);
    if (wants_help(c, argc - 2, argv + 2)) {
        cli_help_command(stdout, c);
        return 0;
    }
    cli_set_command(c->name);
    return c->run(argc - 2, argv + 2);
}
