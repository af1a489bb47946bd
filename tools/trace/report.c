/*
 * report.c: the reports of `weightmap trace`: text (stdout, or --out) and one JSON object
 * (--json; its fields in docs/TRACE.md).
 */
#include "tracer.h"

#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>

static void flags_text(const tmap *m, char *out, size_t cap) {
    snprintf(out, cap, "%s%s%s|%s%s", m->prot & PROT_READ ? "R" : "",
             m->prot & PROT_WRITE ? "W" : "", m->prot & PROT_EXEC ? "X" : "",
             m->flags & MAP_PRIVATE ? "MAP_PRIVATE" : "MAP_SHARED",
             trace_private_writable(m) ? " (privatises on read)" : "");
}

static void text_threads(const trace *t) {
    char b[6][32];
    const wmtrace_stats *st = t->st;
    printf("\nthreads (malloc family; held at exit by size class: address space, touched or "
           "not):\n");
    printf("  %-8s %-16s %-6s %9s %10s %10s %10s %10s %10s %10s %10s\n", "tid", "name", "loader",
           "allocs", "largest", "while-load", "<64K", "64K-1M", "1M-16M", ">=16M", "anon-held");
    for (uint64_t i = 0; i < st->n_threads && i < WMTRACE_MAX_THREADS; i++) {
        const wmtrace_thread *th = &st->threads[i];
        char h[4][32];
        for (int c = 0; c < 4; c++)
            snprintf(h[c], 32, "%s%s", th->held[c] < 0 ? "-" : "",
                     cli_bytes((uint64_t)(th->held[c] < 0 ? -th->held[c] : th->held[c]), b[c]));
        printf("  %-8" PRId64 " %-16.16s %-6s %9" PRIu64 " %10s %10s %10s %10s %10s %10s %10s\n",
               th->tid, th->name, th->loader ? "yes" : "no", th->n_alloc,
               cli_bytes(th->largest, b[4]), cli_bytes(th->largest_loading, b[5]), h[0], h[1], h[2],
               h[3], cli_bytes((uint64_t)(th->anon_held > 0 ? th->anon_held : 0), b[0]));
    }
    if (st->dropped_threads || st->dropped_blocks)
        printf("  (not counted: %" PRIu64 " threads, %" PRIu64 " big blocks: tables full)\n",
               st->dropped_threads, st->dropped_blocks);
}

static void text_files(const trace *t) {
    char b[6][32];
    printf("\nweight files:\n");
    if (!t->n_files) printf("  none seen\n");
    for (int i = 0; i < t->n_files; i++) {
        int live = 0;
        for (int k = 0; k < t->n_maps; k++)
            if (t->maps[k].fidx == i && t->maps[k].t_unmap < 0) live++;
        printf("  [%d] %s (%s, %s): opened %d times, %d mappings, %d live at the end\n", i,
               t->files[i].path, t->files[i].kind, cli_bytes(t->files[i].size, b[0]),
               t->files[i].opens, t->files[i].maps, live);
    }
    if (t->n_maps) printf("\nmappings:\n");
    for (int i = 0; i < t->n_maps; i++) {
        const tmap *m = &t->maps[i];
        char fl[64];
        flags_text(m, fl, sizeof fl);
        printf("  #%-3d [%d] off %" PRIu64 " len %s %s thread %" PRId64 ": mapped %.6f s, ", m->id,
               m->fidx, m->off, cli_bytes(m->len, b[0]), fl, m->tid, m->t_map);
        if (m->t_unmap >= 0)
            printf("unmapped %.6f s\n", m->t_unmap);
        else
            printf("live at the end (%s still mapped)\n", cli_bytes(m->left, b[1]));
    }
    int nlock = 0;
    for (int i = 0; i < t->n_ev; i++) {
        const tevent *e = &t->ev[i];
        if (e->type != 'L' && e->type != 'K' && e->type != 'A' && e->type != 'Z') continue;
        if (!nlock++) printf("\nlocks:\n");
        if (e->type == 'A' || e->type == 'Z')
            printf("  %.6f s %s rc %" PRId64 "\n", e->t, e->type == 'A' ? "mlockall" : "munlockall",
                   e->rc);
        else
            printf("  %.6f s %s 0x%" PRIx64 " %s rc %" PRId64 "%s\n", e->t,
                   e->type == 'L' ? "mlock" : "munlock", e->a, cli_bytes(e->b, b[0]), e->rc,
                   e->c ? " (weight mapping)" : "");
    }
}

/* One figure and its change from the release before ("+1", "-2.0 MiB"; "" for the first, or
 * where either was not read). */
static const char *delta(uint64_t now, uint64_t before, bool first, bool bytes, char buf[40]) {
    char b[32];
    if (first) return "";
    uint64_t d = now >= before ? now - before : before - now;
    if (bytes)
        snprintf(buf, 40, " (%s%s)", now >= before ? "+" : "-", cli_bytes(d, b));
    else
        snprintf(buf, 40, " (%s%" PRIu64 ")", now >= before ? "+" : "-", d);
    return buf;
}

/* A figure of a release with its change ("not read" where the process could not read it). */
static const char *fig(const trelease *r, const trelease *p, unsigned bit, size_t off, bool bytes,
                       char out[80]) {
    uint64_t v, w;
    memcpy(&v, (const char *)&r->at + off, sizeof v);
    memcpy(&w, (const char *)&p->at + off, sizeof w);
    if (!fig_read(&r->at, bit)) return "not read";
    char b[32], d[40];
    bool first = r == p || !fig_read(&p->at, bit);
    if (bytes)
        snprintf(out, 80, "%s%s", cli_bytes(v, b), delta(v, w, first, true, d));
    else
        snprintf(out, 80, "%" PRIu64 "%s", v, delta(v, w, first, false, d));
    return out;
}

/* The markers: the user's, and the known runtimes' that were hooked. */
static void text_markers(const trace *t) {
    int n = 0;
    for (uint64_t k = 0; k < t->st->n_specs && k < WMTRACE_MAX_SPECS; k++) {
        const wmtrace_spec *s = &t->st->specs[k];
        if (s->known && !s->sites) continue;
        if (!n++) printf("\nmarkers:\n");
        printf("  %s marker %s%s%s%s: %" PRIu64 " site%s%s%s, %" PRIu64 " calls",
               s->kind == 'L'   ? "load"
               : s->kind == 'T' ? "table"
                                : "release",
               s->text, s->known ? " (known: " : "", s->known ? s->runtime : "",
               s->known ? ")" : "", s->sites, s->sites == 1 ? "" : "s", s->sites ? " in " : "",
               s->object, s->hits);
        if (s->known == 2 && s->sites && !s->hits)
            printf(" (a fallback: not used where another runtime's marker is hooked)");
        if (s->unpaired) printf(", %" PRIu64 " for no live load's handle", s->unpaired);
        if (!s->sites) {
            printf(": matched nothing (searched %" PRIu64 " object%s:", s->searched,
                   s->searched == 1 ? "" : "s");
            size_t on = strcspn(s->text, ":+");
            bool scoped = s->text[on] == ':' || (s->text[on] == '+' && s->text[on + 1] == '0');
            for (int i = 0; i < t->n_objects; i++)
                if (!scoped || !strncmp(t->objects[i].name, s->text, on))
                    printf(" %s%s%s%s", t->objects[i].name, t->objects[i].table[0] ? " [" : "",
                           t->objects[i].table, t->objects[i].table[0] ? "]" : "");
            printf(")");
        }
        printf("\n");
    }
}

static void text_releases(const trace *t) {
    char b[5][32], f[8][80];
    text_markers(t);
    printf("\nreleases: %d\n", t->n_rel);
    for (int i = 0; i < t->n_rel; i++) {
        const trelease *r = &t->rel[i], *p = i ? &t->rel[i - 1] : r;
        const tsample *a = &r->at;
        char live[96] = "not read", pair[64];
        if (fig_read(a, FIG_FOOTPRINT | FIG_MFREE) && a->footprint > a->mfree)
            cli_bytes(a->footprint - a->mfree, live);
        else if (fig_read(a, FIG_FOOTPRINT | FIG_MFREE))
            snprintf(live, sizeof live, "0 B (malloc's free memory is more: untouched heap)");
        if (r->load < 0)
            snprintf(pair, sizeof pair, "no load before it");
        else
            snprintf(pair, sizeof pair, "%s load %d%s", r->by_handle ? "of" : "after", r->load + 1,
                     r->by_handle ? " (its handle)" : " (by time only)");
        printf("  #%d %.6f s %s thread %" PRId64 " (%.16s), %s: footprint %s, resident %s, "
               "file-resident %s, mappings %s (weight %" PRIu64 "), locked %s; malloc free %s, "
               "live (footprint less malloc free) %s; the load's malloc still held %s (%s of "
               "it resident), its scratch still resident %s\n",
               i + 1, r->t, r->source, r->tid, trace_thread_name(t, r->tid), pair,
               fig(r, p, FIG_FOOTPRINT, offsetof(tsample, footprint), true, f[0]),
               fig(r, p, FIG_RSS, offsetof(tsample, rss), true, f[1]),
               fig(r, p, FIG_FILE, offsetof(tsample, file), true, f[2]),
               fig(r, p, FIG_MAPS, offsetof(tsample, maps), false, f[3]), a->wmaps,
               fig(r, p, FIG_LOCKED, offsetof(tsample, locked), true, f[4]),
               fig(r, p, FIG_MFREE, offsetof(tsample, mfree), true, f[5]), live,
               cli_bytes(r->kept, b[0]), cli_bytes(r->kept_resident, b[1]),
               r->scratch_resident < 0 ? "(not known)"
                                       : cli_bytes((uint64_t)r->scratch_resident, b[2]));
    }
}

static void text_loads(const trace *t) {
    char b[5][32];
    if (t->n_loads) printf("\nloads: %d\n", t->n_loads);
    for (int i = 0; i < t->n_loads; i++) {
        const wmtrace_load *ld = trace_load_stats(t, i);
        if (!ld) continue;
        printf("  #%d %.6f-", i + 1, t->loads[i].t_begin);
        if (t->loads[i].t_end >= 0)
            printf("%.6f s", t->loads[i].t_end);
        else
            printf("(not ended)");
        char res[32];
        printf(" thread %" PRId64 " (%s): malloc %s in %" PRIu64 " big blocks; scratch %s "
               "(largest %s); kept past its end %s of address space (%s of it resident); freed "
               "by a release %s\n",
               ld->tid,
               ld->spec >= 0 && (uint64_t)ld->spec < WMTRACE_MAX_SPECS
                   ? t->st->specs[ld->spec].text
                   : "from the first weight-file touch",
               cli_bytes(ld->bytes, b[0]), ld->blocks, cli_bytes(ld->scratch, b[1]),
               cli_bytes(ld->scratch_largest, b[2]), cli_bytes(ld->kept_at_end, b[3]),
               cli_bytes(ld->kept_resident, res), cli_bytes(ld->freed_in_release, b[4]));
    }
}

/* The outcome, the broken rules' lines, then each rule's state. */
static void text_verdict(const trace *t) {
    int broken_rules = 0;
    for (int k = 0; k < N_RULES; k++)
        broken_rules += t->rules[k].broken > 0;
    if (t->broken)
        printf("\nverdict: broken (%d rule%s broken", broken_rules, broken_rules == 1 ? "" : "s");
    else if (t->not_judged)
        printf("\nverdict: not judged (no rule broken, but %d thing%s not judged", t->not_judged,
               t->not_judged == 1 ? "" : "s");
    else
        printf("\nverdict: clean (every rule judged and held");
    printf(")\n");
    for (int i = 0; i < t->broken; i++)
        printf("  %s: %s\n", t->v[i].rule, t->v[i].msg);
    printf("rules:\n");
    for (int k = 0; k < N_RULES; k++) {
        const rule_state *r = &t->rules[k];
        if (r->broken)
            printf("  %-9s broken (%d line%s above)\n", r->rule, r->broken,
                   r->broken == 1 ? "" : "s");
        else
            printf("  %-9s %s: %s\n", r->rule, r->judged ? "judged, held" : "not judged", r->how);
    }
    if (!t->n_rel) printf("  (%s)\n", trace_no_release_hint(t));
    for (uint64_t k = 0; k < t->st->n_specs && k < WMTRACE_MAX_SPECS; k++) {
        const wmtrace_spec *s = &t->st->specs[k];
        if (!s->known && !s->sites)
            printf("  marker %s matched nothing (searched %" PRIu64
                   " object%s; the markers section names them): not judged\n",
                   s->text, s->searched, s->searched == 1 ? "" : "s");
    }
}

void trace_report_text(const trace *t) {
    char b[4][32];
    printf("weightmap trace: %s (pid %d): exit %d, %.3f s, %s\n", t->args.cmd[0], (int)t->pid,
           trace_exit_of(t->status), t->t_end,
           t->exited_normally ? "normal exit" : "no normal exit");
    text_threads(t);
    text_files(t);
    text_loads(t);
    text_releases(t);
    for (int i = 0; i < t->n_ev; i++)
        if (t->ev[i].type == 'W') printf("warning: %s\n", t->ev[i].text);
    uint64_t s0, pk, e0;
    trace_fp_figures(t, &s0, &pk, &e0);
    printf("footprint: first %s, peak %s, last %s (%d samples; the tracer's tables are %s of it at "
           "most)\n",
           cli_bytes(s0, b[0]), cli_bytes(pk, b[1]), cli_bytes(e0, b[2]), t->n_samples,
           cli_bytes(t->st->tracer_bytes, b[3]));
    if (t->n_v > t->broken) printf("\nfacts:\n");
    for (int i = t->broken; i < t->n_v; i++)
        printf("  %s\n", t->v[i].msg);
    text_verdict(t);
}

static void json_head(const trace *t) {
    const wmtrace_stats *st = t->st;
    printf("{\"command\":");
    cli_json_cstr(stdout, t->args.cmd[0]);
    const char *outcome = trace_outcome(t);
    printf(",\"pid\":%d,\"exit_status\":%d,\"normal_exit\":%s,\"seconds\":%.6f,\"ok\":%s,"
           "\"outcome\":\"%s\"",
           (int)t->pid, trace_exit_of(t->status), t->exited_normally ? "true" : "false", t->t_end,
           strcmp(outcome, "clean") ? "false" : "true", outcome);
    printf(",\"markers\":[");
    for (uint64_t k = 0; k < st->n_specs && k < WMTRACE_MAX_SPECS; k++) {
        const wmtrace_spec *sp = &st->specs[k];
        printf("%s{\"spec\":", k ? "," : "");
        cli_json_cstr(stdout, sp->text);
        printf(",\"kind\":\"%s\",\"sites\":%" PRIu64 ",\"calls\":%" PRIu64 ",\"object\":",
               sp->kind == 'L'   ? "load"
               : sp->kind == 'T' ? "table"
                                 : "release",
               sp->sites, sp->hits);
        cli_json_cstr(stdout, sp->object);
        printf(",\"known\":");
        if (sp->known)
            cli_json_cstr(stdout, sp->runtime);
        else
            printf("null");
        printf(",\"searched\":%" PRIu64 ",\"unpaired\":%" PRIu64 "}", sp->searched, sp->unpaired);
    }
    printf("],\"objects_searched\":[");
    for (int i = 0; i < t->n_objects; i++) {
        printf("%s{\"name\":", i ? "," : "");
        cli_json_cstr(stdout, t->objects[i].name);
        printf(",\"symbols\":");
        cli_json_cstr(stdout, t->objects[i].table);
        printf("}");
    }
    printf("],\"tracer_bytes\":%" PRIu64 ",\"threads\":[", st->tracer_bytes);
    for (uint64_t i = 0; i < st->n_threads && i < WMTRACE_MAX_THREADS; i++) {
        const wmtrace_thread *th = &st->threads[i];
        printf("%s{\"tid\":%" PRId64 ",\"name\":", i ? "," : "", th->tid);
        cli_json_string(stdout, th->name, strnlen(th->name, sizeof th->name));
        printf(",\"loader\":%s,\"allocs\":%" PRIu64 ",\"alloc_bytes\":%" PRIu64
               ",\"largest\":%" PRIu64 ",\"largest_loading\":%" PRIu64 ",\"held\":[%" PRId64
               ",%" PRId64 ",%" PRId64 ",%" PRId64 "],\"anon_maps\":%" PRIu64
               ",\"anon_largest\":%" PRIu64 ",\"anon_held\":%" PRId64 ",\"weight_read\":%" PRIu64
               ",\"freed_others\":%" PRIu64 "}",
               th->loader ? "true" : "false", th->n_alloc, th->bytes_alloc, th->largest,
               th->largest_loading, th->held[0], th->held[1], th->held[2], th->held[3],
               th->anon_maps, th->anon_largest, th->anon_held, th->weight_read, th->freed_others);
    }
}

static void json_files(const trace *t) {
    printf("],\"files\":[");
    for (int i = 0; i < t->n_files; i++) {
        int live = 0;
        for (int k = 0; k < t->n_maps; k++)
            if (t->maps[k].fidx == i && t->maps[k].t_unmap < 0) live++;
        printf("%s{\"path\":", i ? "," : "");
        cli_json_cstr(stdout, t->files[i].path);
        printf(",\"kind\":\"%s\",\"size\":%" PRIu64 ",\"opens\":%d,\"mappings\":%d,\"live\":%d}",
               t->files[i].kind, t->files[i].size, t->files[i].opens, t->files[i].maps, live);
    }
    printf("],\"mappings\":[");
    for (int i = 0; i < t->n_maps; i++) {
        const tmap *m = &t->maps[i];
        printf(
            "%s{\"id\":%d,\"file\":%d,\"offset\":%" PRIu64 ",\"length\":%" PRIu64
            ",\"prot\":%d,\"private\":%s,\"writable\":%s,\"privatises_on_read\":%s,\"tid\":%" PRId64
            ",\"mapped\":%.6f,\"unmapped\":",
            i ? "," : "", m->id, m->fidx, m->off, m->len, m->prot,
            m->flags & MAP_PRIVATE ? "true" : "false", m->prot & PROT_WRITE ? "true" : "false",
            trace_private_writable(m) ? "true" : "false", m->tid, m->t_map);
        if (m->t_unmap >= 0)
            printf("%.6f", m->t_unmap);
        else
            printf("null");
        printf(",\"left\":%" PRIu64 ",\"load\":%d}", m->left, m->load + 1);
    }
    printf("],\"locks\":[");
    for (int i = 0, n = 0; i < t->n_ev; i++) {
        const tevent *e = &t->ev[i];
        if (e->type != 'L' && e->type != 'K' && e->type != 'A' && e->type != 'Z') continue;
        printf("%s{\"call\":\"%s\",\"time\":%.6f,\"addr\":%" PRIu64 ",\"length\":%" PRIu64
               ",\"rc\":%" PRId64 ",\"weight\":%s}",
               n++ ? "," : "",
               e->type == 'L'   ? "mlock"
               : e->type == 'K' ? "munlock"
               : e->type == 'A' ? "mlockall"
                                : "munlockall",
               e->t, e->a, e->b, e->rc, e->c ? "true" : "false");
    }
}

/* A figure, or null where the process could not read it. */
static void json_fig(const char *key, const tsample *s, unsigned bit, uint64_t v, bool comma) {
    printf("%s\"%s\":", comma ? "," : "", key);
    if (fig_read(s, bit))
        printf("%" PRIu64, v);
    else
        printf("null");
}

static void json_point(const tsample *s) {
    json_fig("footprint", s, FIG_FOOTPRINT, s->footprint, false);
    json_fig("resident", s, FIG_RSS, s->rss, true);
    json_fig("file_resident", s, FIG_FILE, s->file, true);
    json_fig("locked", s, FIG_LOCKED, s->locked, true);
    json_fig("mappings", s, FIG_MAPS, s->maps, true);
    json_fig("weight_mappings", s, 0, s->wmaps, true);
    json_fig("malloc_free", s, FIG_MFREE, s->mfree, true);
    json_fig("live", s, FIG_FOOTPRINT | FIG_MFREE,
             s->footprint > s->mfree ? s->footprint - s->mfree : 0, true);
}

static void json_releases(const trace *t) {
    printf("],\"releases\":[");
    for (int i = 0; i < t->n_rel; i++) {
        const trelease *r = &t->rel[i];
        printf("%s{\"time\":%.6f,\"entered\":%.6f,\"source\":", i ? "," : "", r->t, r->t_begin);
        cli_json_cstr(stdout, r->source);
        printf(",\"tid\":%" PRId64 ",\"load\":%d,\"paired\":\"%s\",\"load_kept\":%" PRIu64
               ",\"load_kept_resident\":%" PRIu64,
               r->tid, r->load + 1, r->by_handle ? "handle" : "time", r->kept, r->kept_resident);
        if (r->scratch_resident >= 0)
            printf(",\"scratch_resident\":%" PRId64, r->scratch_resident);
        else
            printf(",\"scratch_resident\":null");
        json_fig("footprint", &r->at, FIG_FOOTPRINT, r->at.footprint, true);
        printf(",\"at\":{");
        json_point(&r->at);
        printf("}}");
    }
    printf("],\"loads\":[");
    for (int i = 0; i < t->n_loads; i++) {
        const wmtrace_load *ld = trace_load_stats(t, i);
        if (!ld) continue;
        printf("%s{\"begin\":%.6f,\"end\":", i ? "," : "", t->loads[i].t_begin);
        if (t->loads[i].t_end >= 0)
            printf("%.6f", t->loads[i].t_end);
        else
            printf("null");
        printf(",\"tid\":%" PRId64 ",\"marker\":%s,\"blocks\":%" PRIu64 ",\"bytes\":%" PRIu64
               ",\"scratch\":%" PRIu64 ",\"scratch_largest\":%" PRIu64 ",\"kept_at_end\":%" PRIu64
               ",\"kept_largest\":%" PRIu64 ",\"kept\":%" PRIu64 ",\"freed_in_release\":%" PRIu64
               ",\"release_tid\":%" PRId64 ",\"kept_resident\":%" PRIu64 ",\"handle\":%" PRIu64
               ",\"released_by_handle\":%s}",
               ld->tid, ld->spec >= 0 ? "true" : "false", ld->blocks, ld->bytes, ld->scratch,
               ld->scratch_largest, ld->kept_at_end, ld->kept_largest, ld->kept,
               ld->freed_in_release, ld->release_tid, ld->kept_resident, ld->handle,
               ld->released ? "true" : "false");
    }
}

void trace_report_json(const trace *t) {
    json_head(t);
    json_files(t);
    json_releases(t);
    uint64_t s0, pk, e0;
    trace_fp_figures(t, &s0, &pk, &e0);
    printf("],\"footprint\":{\"samples\":%d,\"first\":%" PRIu64 ",\"peak\":%" PRIu64
           ",\"last\":%" PRIu64 "}",
           t->n_samples, s0, pk, e0);
    for (int pass = 0; pass < 2; pass++) {
        printf(pass ? "],\"facts\":[" : ",\"verdicts\":[");
        for (int i = pass ? t->broken : 0, n = 0; i < (pass ? t->n_v : t->broken); i++) {
            printf("%s{", n++ ? "," : "");
            if (!pass) printf("\"rule\":\"%s\",", t->v[i].rule);
            printf("\"time\":%.6f,\"message\":", t->v[i].t);
            cli_json_cstr(stdout, t->v[i].msg);
            printf("}");
        }
    }
    printf("],\"rules\":[");
    for (int k = 0; k < N_RULES; k++) {
        const rule_state *r = &t->rules[k];
        printf("%s{\"rule\":\"%s\",\"state\":\"%s\",\"judged\":%s,\"broken\":%d,\"how\":",
               k ? "," : "", r->rule,
               r->broken   ? "broken"
               : r->judged ? "held"
                           : "not judged",
               r->broken || r->judged ? "true" : "false", r->broken);
        cli_json_cstr(stdout, r->broken ? "" : r->how);
        printf("}");
    }
    printf("],\"warnings\":[");
    for (int i = 0, n = 0; i < t->n_ev; i++) {
        if (t->ev[i].type != 'W') continue;
        printf("%s", n++ ? "," : "");
        cli_json_cstr(stdout, t->ev[i].text);
    }
    printf("]}\n");
}
