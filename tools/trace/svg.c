/*
 * svg.c: the picture of a trace (--svg OUT), a hand-made SVG at least 960 px wide.
 *
 * Layout (docs/TRACE.md): the chart in y 40..240 with the footprint (#1f77b4) and resident
 * (#8c8c8c) curves, loads as bands behind them (#ffe9a8, labelled "load N"), releases as dashed
 * lines (#9467bd, labelled "release N"); the time axis at y 240, its ticks labelled with the
 * report's own times (seconds from the start of the trace, as the JSON and text give them); each
 * broken rule a triangle (#d62728) under the axis at its time (y 258..266); one 12-px bar per
 * weight-file mapping every 16 px from y 270 (green #2ca02c returned in time, red #d62728 alive
 * after a release, orange #ff7f0e private writable), labelled in a left margin as wide as its
 * longest label needs (the picture widens with it); then the broken rules, each wrapped onto as
 * many 14-px lines as the width needs, and the legend, wrapped the same way. No text is cut.
 */
#include "tracer.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define SVG_MIN_W 960
#define SVG_MARGIN 170.0 /* the least left margin */
#define SVG_CHART 760.0  /* the chart's width */
#define SVG_BARS_Y 270
#define SVG_RULES 20 /* broken rules listed under the bars */
/* A generous width per character (sans-serif at 11 px averages about 6; wide capitals reach 8):
 * text is laid out by this, so it fits whatever font renders it. */
#define SVG_CHAR_PX 7.0

/* The time axis maps [from, from + span] seconds of the report onto [x0, x1]. */
typedef struct frame {
    double from, span, top, x0, x1;
    int w;
} frame;

static double fx(const frame *f, double t) {
    double u = (t - f->from) / f->span;
    return f->x0 + (f->x1 - f->x0) * (u < 0 ? 0 : u > 1 ? 1 : u);
}
static double fy(const frame *f, uint64_t v) { return 240.0 - 200.0 * (double)v / f->top; }

static void svg_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

/* The axis: a tick every 1, 2 or 5 x 10^k seconds, about eight of them, at the multiples of the
 * step inside the frame and labelled with their own time (the report's clock, not the frame's). */
static void axis(FILE *f, const frame *fr, uint64_t peak) {
    char b[32];
    fprintf(f, "<line x1=\"%.1f\" y1=\"240\" x2=\"%.1f\" y2=\"240\" stroke=\"#000000\"/>\n", fr->x0,
            fr->x1);
    fprintf(f, "<line x1=\"%.1f\" y1=\"40\" x2=\"%.1f\" y2=\"240\" stroke=\"#000000\"/>\n", fr->x0,
            fr->x0);
    fprintf(f, "<text x=\"4\" y=\"%.1f\">%s</text>\n", fy(fr, peak) + 4, cli_bytes(peak, b));
    fprintf(f, "<text x=\"4\" y=\"244\">0</text>\n");
    double raw = fr->span / 8, mag = pow(10, floor(log10(raw))), step = mag;
    if (raw / mag > 5)
        step = 10 * mag;
    else if (raw / mag > 2)
        step = 5 * mag;
    else if (raw / mag > 1)
        step = 2 * mag;
    int digits = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    double first = ceil(fr->from / step - 1e-9);
    for (int k = 0; (first + k) * step <= (fr->from + fr->span) * 1.0001 && k < 50; k++) {
        double at = (first + k) * step, x = fx(fr, at);
        fprintf(f,
                "<line class=\"tick\" x1=\"%.2f\" y1=\"240\" x2=\"%.2f\" y2=\"245\" "
                "stroke=\"#000000\"/>\n<text class=\"tick\" x=\"%.2f\" y=\"255\" "
                "text-anchor=\"middle\">%.*f s</text>\n",
                x, x, x, digits, at);
    }
}

/* Writes s as <text> lines at x from y on, each at most `chars` characters, broken at spaces
 * (a word longer than a line is broken where the line ends); returns the lines written. With
 * f NULL it only counts them. */
static int wrapped(FILE *f, const char *s, int chars, double x, int y, const char *attrs) {
    int lines = 0;
    size_t n = strlen(s);
    while (n) {
        size_t take = n;
        if ((int)n > chars) {
            take = (size_t)chars;
            while (take > (size_t)chars / 2 && s[take] != ' ')
                take--;
            if (s[take] != ' ') take = (size_t)chars;
        }
        if (f) {
            char line[1024];
            snprintf(line, sizeof line, "%.*s", (int)(take < sizeof line ? take : sizeof line - 1),
                     s);
            fprintf(f, "<text x=\"%.1f\" y=\"%d\"%s>", x, y + 14 * lines, attrs);
            svg_text(f, line);
            fprintf(f, "</text>\n");
        }
        lines++;
        s += take;
        n -= take;
        while (*s == ' ') {
            s++;
            n--;
        }
    }
    return lines;
}

/* The characters a line of text may hold at x in a picture fr->w wide (130 at most, to be
 * read). */
static int line_chars(const frame *fr, double x) {
    int n = (int)(((double)fr->w - x - 8) / SVG_CHAR_PX);
    return n < 130 ? n : 130;
}

static void curve(FILE *f, const trace *t, const frame *fr, bool resident) {
    if (!t->n_samples) return;
    fprintf(f, "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"",
            resident ? "resident" : "footprint", resident ? "#8c8c8c" : "#1f77b4",
            resident ? "1" : "2");
    for (int i = 0; i < t->n_samples; i++)
        fprintf(f, "%s%.1f,%.1f", i ? " " : "", fx(fr, t->samples[i].t),
                fy(fr, resident ? t->samples[i].rss : t->samples[i].footprint));
    fprintf(f, "\"/>\n");
}

/* Loads as bands behind the curves, releases as dashed lines over the whole height. */
static void loads_and_releases(FILE *f, const trace *t, const frame *fr, int h) {
    for (int i = 0; i < t->n_loads; i++) {
        double x0 = fx(fr, t->loads[i].t_begin);
        double x1 = fx(fr, t->loads[i].t_end >= 0 ? t->loads[i].t_end : t->t_end);
        if (x1 - x0 < 3) x1 = x0 + 3;
        fprintf(f,
                "<rect class=\"load\" x=\"%.1f\" y=\"40\" width=\"%.1f\" height=\"200\" "
                "fill=\"#ffe9a8\"/>\n<text x=\"%.1f\" y=\"%d\" font-size=\"9\">load %d</text>\n",
                x0, x1 - x0, x0 + 1, 50 + 10 * (i % 3), i + 1);
    }
    for (int i = 0; i < t->n_rel; i++) {
        double x = fx(fr, t->rel[i].t);
        bool right = x > fr->x1 - 50; /* the label goes left of a line near the right edge */
        fprintf(f,
                "<line class=\"release\" x1=\"%.1f\" y1=\"40\" x2=\"%.1f\" y2=\"%d\" "
                "stroke=\"#9467bd\" stroke-width=\"1\" stroke-dasharray=\"4 3\"/>\n"
                "<text x=\"%.1f\" y=\"%d\" font-size=\"9\" fill=\"#9467bd\"%s>release %d</text>\n",
                x, x, h - 20, right ? x - 2 : x + 2, 80 + 10 * (i % 3),
                right ? " text-anchor=\"end\"" : "", i + 1);
    }
}

static void bars_and_rules(FILE *f, const trace *t, const frame *fr) {
    for (int i = 0; i < t->n_maps; i++) {
        const tmap *m = &t->maps[i];
        double x0 = fx(fr, m->t_map), x1 = fx(fr, m->t_unmap < 0 ? t->t_end : m->t_unmap);
        if (x1 - x0 < 2) x1 = x0 + 2;
        const char *col = trace_private_writable(m) ? "#ff7f0e"
                          : m->after_release        ? "#d62728"
                                                    : "#2ca02c";
        int y = SVG_BARS_Y + 16 * i;
        fprintf(
            f,
            "<rect class=\"map\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"12\" fill=\"%s\"/>\n",
            x0, y, x1 - x0, col);
        /* The label, whole, in the left margin (sized for the longest: bar_label). */
        fprintf(f, "<text class=\"maplabel\" x=\"4\" y=\"%d\">#%d ", y + 10, m->id);
        svg_text(f, trace_fname(t, m->fidx));
        fprintf(f, "</text>\n");
    }
    int y = SVG_BARS_Y + 16 * t->n_maps + 14;
    for (int i = 0; i < t->broken; i++) {
        double x = fx(fr, t->v[i].t);
        fprintf(f,
                "<polygon class=\"verdict\" points=\"%.1f,258 %.1f,266 %.1f,266\" "
                "fill=\"#d62728\"/>\n",
                x, x - 5, x + 5);
        if (i >= SVG_RULES) continue;
        char line[sizeof t->v[i].msg + 64];
        snprintf(line, sizeof line, "%.6f s %.24s: %s", t->v[i].t, t->v[i].rule, t->v[i].msg);
        y += 14 * wrapped(f, line, line_chars(fr, 4), 4, y, " class=\"rule\" fill=\"#d62728\"");
    }
}

/* The height the rule lines take, wrapped (as bars_and_rules writes them). */
static int rules_height(const trace *t, const frame *fr) {
    int lines = 0;
    for (int i = 0; i < t->broken && i < SVG_RULES; i++) {
        char line[sizeof t->v[i].msg + 64];
        snprintf(line, sizeof line, "%.6f s %.24s: %s", t->v[i].t, t->v[i].rule, t->v[i].msg);
        lines += wrapped(NULL, line, line_chars(fr, 4), 4, 0, "");
    }
    return 14 * lines;
}

static const char legend[] =
    "bars: weight-file mappings, map to unmap (green returned, red alive after a release, orange "
    "private writable); triangles: broken rules";

/* The frame: the margin as wide as the longest bar label needs, the chart 760 px, the picture as
 * wide as both (at least 960 px, and enough for the title's line). */
static frame make_frame(const trace *t, uint64_t pk) {
    frame fr = {t->t_start,
                t->t_end - t->t_start > 0 ? t->t_end - t->t_start : 1,
                pk ? (double)pk * 1.1 : 1,
                SVG_MARGIN,
                0,
                SVG_MIN_W};
    for (int i = 0; i < t->n_maps; i++) {
        char label[32];
        int n = snprintf(label, sizeof label, "#%d ", t->maps[i].id);
        double px =
            4 + SVG_CHAR_PX * (double)(n + (int)strlen(trace_fname(t, t->maps[i].fidx))) + 12;
        if (px > fr.x0) fr.x0 = px;
    }
    fr.x1 = fr.x0 + SVG_CHART;
    double w = fr.x1 + 30;
    double title = 20 + SVG_CHAR_PX * 1.3 * (double)(strlen(t->args.cmd[0]) + 48);
    if (title > w) w = title;
    fr.w = w > SVG_MIN_W ? (int)ceil(w) : SVG_MIN_W;
    return fr;
}

int trace_write_svg(const trace *t, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "weightmap: %s: %s\n", path, strerror(errno));
        return 1;
    }
    uint64_t s0, pk, e0;
    trace_fp_figures(t, &s0, &pk, &e0);
    for (int i = 0; i < t->n_samples; i++)
        if (t->samples[i].rss > pk) pk = t->samples[i].rss;
    /* The time axis: from the traced process's start (its first X line) to its end. */
    frame fr = make_frame(t, pk);
    int legend_lines = wrapped(NULL, legend, line_chars(&fr, 4), 4, 0, "");
    int h = SVG_BARS_Y + 16 * t->n_maps + rules_height(t, &fr) + 14 * legend_lines + 16;
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
            "%d\" font-family=\"sans-serif\" font-size=\"11\">\n"
            "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
            fr.w, h, fr.w, h, fr.w, h);
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\">weightmap trace: ");
    svg_text(f, t->args.cmd[0]);
    fprintf(f, " (exit %d, %.3f s, %s)</text>\n", trace_exit_of(t->status), t->t_end,
            t->broken ? "rules broken" : trace_outcome(t));
    fprintf(f,
            "<text x=\"%.1f\" y=\"36\">footprint (anonymous + swap + shmem, blue), resident "
            "(grey); loads (bands), releases (dashed)</text>\n",
            fr.x0 + 4);
    loads_and_releases(f, t, &fr, h);
    axis(f, &fr, pk);
    curve(f, t, &fr, true);
    curve(f, t, &fr, false);
    bars_and_rules(f, t, &fr);
    wrapped(f, legend, line_chars(&fr, 4), 4, h - 14 * legend_lines - 2, " class=\"legend\"");
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "weightmap: %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}
