/*
 * elfsym.c: where the markers' functions are. The loaded objects come from the dynamic linker's
 * debugger interface (r_debug's list of link maps: the program, its libraries, everything
 * dlopen'ed), and their functions from each object's file: .symtab when it has one (internal
 * functions too), else .dynsym. A marker by offset (OBJECT+0xOFFSET) needs no symbol at all.
 * The scan runs at start-up and each time the dynamic linker says its list is consistent again
 * (the probe on r_brk, its _dl_debug_state), so an object dlopen'ed later is searched before its
 * code can run. No allocation: files are read through a private read-only mapping.
 */
#include "interposer.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int find_debug(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
        const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        for (; d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_DEBUG) *(void **)data = (void *)d->d_un.d_ptr;
    }
    return 1; /* the first object is the program */
}

/* DT_DEBUG, which the dynamic linker fills with its own r_debug (a copy relocation of _r_debug
 * in a program would be a stale snapshot), else _r_debug. */
void *wt_r_debug_get(void) {
    static void *r;
    if (!r) dl_iterate_phdr(find_debug, &r);
    if (!r) r = &_r_debug;
    return r;
}

int wt_elf_symbols(const char *path, void (*fn)(void *, const char *, uint64_t, uint64_t),
                   void *arg) {
    int fd = (int)wt_sys_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    void *m = MAP_FAILED;
    if (wt_sys_fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(ElfW(Ehdr)))
        m = wt_sys_mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    wt_sys_close(fd);
    if (m == MAP_FAILED) return -1;
    size_t size = (size_t)st.st_size;
    const unsigned char *b = m;
    const ElfW(Ehdr) *eh = m;
    int rc = -1;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shoff > size ||
        (size - eh->e_shoff) / sizeof(ElfW(Shdr)) < eh->e_shnum)
        goto done;
    const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(b + eh->e_shoff), *sym = NULL;
    for (int i = 0; i < eh->e_shnum; i++)
        if (sh[i].sh_type == SHT_SYMTAB || (sh[i].sh_type == SHT_DYNSYM && !sym)) sym = &sh[i];
    int table = sym && sym->sh_type == SHT_SYMTAB ? 1 : 2;
    if (!sym || sym->sh_link >= eh->e_shnum || sym->sh_offset > size ||
        sym->sh_size > size - sym->sh_offset)
        goto done;
    const ElfW(Shdr) *str = &sh[sym->sh_link];
    if (str->sh_offset > size || str->sh_size > size - str->sh_offset || !str->sh_size) goto done;
    const char *names = (const char *)(b + str->sh_offset);
    const ElfW(Sym) *s = (const ElfW(Sym) *)(b + sym->sh_offset);
    for (size_t i = 0; i < sym->sh_size / sizeof *s; i++) {
        if (ELF64_ST_TYPE(s[i].st_info) != STT_FUNC || s[i].st_shndx == SHN_UNDEF ||
            !s[i].st_value || s[i].st_name >= str->sh_size)
            continue;
        if (!memchr(names + s[i].st_name, 0, str->sh_size - s[i].st_name)) continue;
        fn(arg, names + s[i].st_name, s[i].st_value, s[i].st_size);
    }
    rc = table;
done:
    wt_sys_munmap(m, size);
    return rc;
}

/* The bytes from vaddr to the end of the executable PT_LOAD segment of the ELF file at path that
 * holds it; 0 when none does (an offset marker outside the object's code is refused, never
 * dereferenced). Reads the program headers with pread: no mapping, no allocation. */
uint64_t wt_elf_text_left(const char *path, uint64_t vaddr) {
    int fd = (int)wt_sys_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ElfW(Ehdr) eh;
    uint64_t left = 0;
    if (wt_sys_pread(fd, &eh, sizeof eh, 0) == (long)sizeof eh &&
        !memcmp(eh.e_ident, ELFMAG, SELFMAG) && eh.e_phentsize == sizeof(ElfW(Phdr))) {
        for (int i = 0; i < eh.e_phnum && i < 256 && !left; i++) {
            ElfW(Phdr) ph;
            if (wt_sys_pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (uint64_t)i * sizeof ph)) !=
                (long)sizeof ph)
                break;
            if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && vaddr >= ph.p_vaddr &&
                vaddr - ph.p_vaddr < ph.p_filesz)
                left = ph.p_filesz - (vaddr - ph.p_vaddr);
        }
    }
    wt_sys_close(fd);
    return left;
}

/* ---- the scan ---- */

#define OBJECTS 1024
static struct object {
    const void *lm;
    uintptr_t base;
    uintptr_t lo, hi; /* its text, to forget its probes when it goes */
    int seen;
} objects[OBJECTS];
static int n_objects;
static volatile int scan_lock;

size_t wt_tables_bytes_elf(void) { return sizeof objects; }

typedef struct scan {
    uintptr_t base;
    const char *name; /* basename */
    uint64_t specs;   /* the specs that apply to this object */
    uintptr_t lo, hi;
} scan;

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* OBJECT names an object by the start of its file name ("libllama" for libllama.so.0). */
static bool object_matches(const char *object, const char *name) {
    return !object[0] || !strncmp(name, object, strlen(object));
}

static void site(scan *sc, int k, uintptr_t addr, uint64_t size) {
    if (wt_probe_arm(addr, wt_specs[k].kind, k, size) < 0) return;
    wmtrace_spec *out = &wt_stats->specs[k];
    if (!out->sites++) snprintf(out->object, sizeof out->object, "%s", sc->name);
    if (wt_specs[k].known == 1) __atomic_fetch_add(&wt_known_sites, 1, __ATOMIC_RELEASE);
    if (!sc->lo || addr < sc->lo) sc->lo = addr;
    if (addr >= sc->hi) sc->hi = addr + 1;
}

static void on_symbol(void *arg, const char *name, uint64_t value, uint64_t size) {
    scan *sc = arg;
    for (int k = 0; k < wt_n_specs; k++)
        if ((sc->specs >> k & 1) && wt_specs[k].symbol[0] && !strcmp(name, wt_specs[k].symbol))
            site(sc, k, sc->base + value, size);
}

static void scan_object(const struct link_map *lm, bool first, struct object *o) {
    const char *path = lm->l_name && lm->l_name[0] ? lm->l_name : first ? "/proc/self/exe" : NULL;
    if (!path || strstr(path, "linux-vdso") || strstr(path, "libwmtrace") ||
        strstr(path, "libZydis"))
        return;
    char exe[512];
    const char *name = base_name(path);
    if (first && !(lm->l_name && lm->l_name[0])) {
        long n = wt_sys_readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
        name = base_name(exe);
    }
    scan sc = {lm->l_addr, name, 0, 0, 0};
    bool by_symbol = false;
    for (int k = 0; k < wt_n_specs; k++) {
        if (wt_specs[k].table || !object_matches(wt_specs[k].object, name)) continue;
        if (!wt_specs[k].symbol[0]) {
            uint64_t left = wt_elf_text_left(first ? "/proc/self/exe" : path, wt_specs[k].offset);
            if (left) {
                site(&sc, k, lm->l_addr + wt_specs[k].offset, left < 15 ? left : 15);
            } else {
                char msg[256];
                snprintf(msg, sizeof msg, "marker %s not hooked: 0x%llx is not in the code of %s",
                         wt_stats->specs[k].text, (unsigned long long)wt_specs[k].offset, name);
                wt_warn(msg);
            }
            continue;
        }
        sc.specs |= (uint64_t)1 << k;
        __atomic_fetch_add(&wt_stats->specs[k].searched, 1, __ATOMIC_RELAXED);
        by_symbol = true;
    }
    if (by_symbol) {
        int table = wt_elf_symbols(path, on_symbol, &sc);
        wt_line l;
        wt_begin(&l, 'S');
        wt_put_s(&l, name);
        wt_put_s(&l, table == 1 ? "symtab" : table == 2 ? "dynsym" : "none");
        wt_end(&l);
    }
    o->lo = sc.lo;
    o->hi = sc.hi;
}

void wt_rescan(void) {
    struct r_debug *r = wt_r_debug_get();
    if (!r || !wt_n_specs || __atomic_exchange_n(&scan_lock, 1, __ATOMIC_ACQUIRE)) return;
    int saved = wt_tl.in_hook;
    wt_tl.in_hook = 1;
    for (int i = 0; i < n_objects; i++)
        objects[i].seen = 0;
    bool first = true;
    for (const struct link_map *lm = r->r_map; lm; lm = lm->l_next, first = false) {
        int i = 0;
        while (i < n_objects && !(objects[i].lm == lm && objects[i].base == lm->l_addr))
            i++;
        if (i < n_objects) {
            objects[i].seen = 1;
            continue;
        }
        if (n_objects == OBJECTS) break;
        objects[n_objects] = (struct object){lm, lm->l_addr, 0, 0, 1};
        scan_object(lm, first, &objects[n_objects++]);
    }
    for (int i = 0; i < n_objects; i++) {
        if (objects[i].seen) continue;
        if (objects[i].hi) wt_probes_forget(objects[i].lo, objects[i].hi);
        objects[i--] = objects[--n_objects]; /* gone (dlclose) */
    }
    wt_tl.in_hook = saved;
    __atomic_store_n(&scan_lock, 0, __ATOMIC_RELEASE);
}
