/*
 * svg.c: the picture of a trace (--svg OUT), a hand-made SVG 960 px wide.
 *
 * Layout (docs/TRACE.md): the chart in y 40..240 with the footprint (#1f77b4) and resident
 * (#8c8c8c) curves, loads as bands behind them (#ffe9a8, labelled "load N"), releases as dashed
 * lines (#9467bd, labelled "release N"); the time axis at y 240 with ticks in seconds; each
 * broken rule a triangle (#d62728) under the axis at its time (y 258..266); one 12-px bar per
 * weight-file mapping every 16 px from y 270 (green #2ca02c returned in time, red #d62728 alive
 * after a release, orange #ff7f0e private writable); then the broken rules, one line each.
 */
#include "tracer.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define SVG_W 960
#define SVG_X0 170.0
#define SVG_X1 930.0
#define SVG_BARS_Y 270
#define SVG_RULES 20 /* broken rules listed under the bars */

typedef struct frame {
    double from, span, top;
} frame;

static double fx(const frame *f, double t) {
    double u = (t - f->from) / f->span;
    return SVG_X0 + (SVG_X1 - SVG_X0) * (u < 0 ? 0 : u > 1 ? 1 : u);
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

/* The axis: a tick every 1, 2 or 5 x 10^k seconds, about eight of them. */
static void axis(FILE *f, const frame *fr, uint64_t peak) {
    char b[32];
    fprintf(f, "<line x1=\"%.1f\" y1=\"240\" x2=\"%.1f\" y2=\"240\" stroke=\"#000000\"/>\n", SVG_X0,
            SVG_X1);
    fprintf(f, "<line x1=\"%.1f\" y1=\"40\" x2=\"%.1f\" y2=\"240\" stroke=\"#000000\"/>\n", SVG_X0,
            SVG_X0);
    fprintf(f, "<text x=\"4\" y=\"%.1f\">%s</text>\n", fy(fr, peak) + 4, cli_bytes(peak, b));
    fprintf(f, "<text x=\"4\" y=\"244\">0</text>\n");
    double raw = fr->span / 8, mag = pow(10, floor(log10(raw))), step = mag;
    if (raw / mag > 5)
        step = 10 * mag;
    else if (raw / mag > 2)
        step = 5 * mag;
    else if (raw / mag > 1)
        step = 2 * mag;
    int digits = step >= 1 ? 0 : (int)ceil(-log10(step));
    for (int k = 0; k * step <= fr->span * 1.0001 && k < 50; k++) {
        double x = fx(fr, fr->from + k * step);
        fprintf(f,
                "<line class=\"tick\" x1=\"%.1f\" y1=\"240\" x2=\"%.1f\" y2=\"245\" "
                "stroke=\"#000000\"/>\n<text class=\"tick\" x=\"%.1f\" y=\"255\" "
                "text-anchor=\"middle\">%.*f s</text>\n",
                x, x, x, digits, k * step);
    }
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
        bool right = x > SVG_X1 - 50; /* the label goes left of a line near the right edge */
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
        /* The label stays in the left margin (x < SVG_X0): at most 20 characters of the name. */
        char label[24];
        snprintf(label, sizeof label, "%.20s", trace_fname(t, m->fidx));
        fprintf(f, "<text x=\"4\" y=\"%d\">#%d ", y + 10, m->id);
        svg_text(f, label);
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
        fprintf(f, "<text x=\"4\" y=\"%d\" fill=\"#d62728\">%.3f s %s: ", y, t->v[i].t,
                t->v[i].rule);
        char msg[140];
        snprintf(msg, sizeof msg, "%.130s", t->v[i].msg);
        svg_text(f, msg);
        fprintf(f, "</text>\n");
        y += 14;
    }
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
    frame fr = {t->t_start, t->t_end - t->t_start > 0 ? t->t_end - t->t_start : 1,
                pk ? (double)pk * 1.1 : 1};
    int listed = t->broken < SVG_RULES ? t->broken : SVG_RULES;
    int h = SVG_BARS_Y + 16 * t->n_maps + 14 * listed + 30;
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
            "%d\" font-family=\"sans-serif\" font-size=\"11\">\n"
            "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
            SVG_W, h, SVG_W, h, SVG_W, h);
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\">weightmap trace: ");
    svg_text(f, t->args.cmd[0]);
    fprintf(f, " (exit %d, %.3f s, %s)</text>\n", trace_exit_of(t->status), t->t_end,
            t->broken ? "rules broken" : "clean");
    fprintf(f,
            "<text x=\"%.1f\" y=\"36\">footprint (anonymous + swap + shmem, blue), resident "
            "(grey); loads (bands), releases (dashed)</text>\n",
            SVG_X0 + 4);
    loads_and_releases(f, t, &fr, h);
    axis(f, &fr, pk);
    curve(f, t, &fr, true);
    curve(f, t, &fr, false);
    bars_and_rules(f, t, &fr);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%d\">bars: weight-file mappings, map to unmap (green returned, "
            "red alive after a release, orange private writable); triangles: broken rules</text>\n"
            "</svg>\n",
            SVG_X0, h - 6);
    if (fclose(f) != 0) {
        fprintf(stderr, "weightmap: %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}
