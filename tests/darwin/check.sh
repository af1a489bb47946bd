#!/bin/sh
# check.sh: the checks of what the Darwin lane built (make darwin; ctest label darwin in
# build-darwin/), read from the Mach-O files with Debian's llvm-nm and llvm-objdump, since no
# Darwin program can run here. tests/CMakeLists.txt makes one ctest entry per check:
#   check.sh CHECK BUILD_DIR SOURCE_DIR
# The library's objects are the members of libweightmap.a (what ships and what the dylib is
# linked from); the CLI's are its object files (CMake's $<TARGET_OBJECTS>, in
# BUILD_DIR/darwin-cli-objects.txt), the library's sources those CMake compiled
# (BUILD_DIR/darwin-sources.txt).
#
#   pages        the dylib imports vm_allocate and vm_deallocate, and wm__os_pages_alloc/free
#                (every page the library takes: the counted allocator's large blocks, scratch,
#                heap-mode tensors) are defined in darwin.c.o, which imports both; no other
#                object defines them
#   figures      the dylib imports task_info, proc_pidinfo, proc_pid_rusage and
#                vm_region_recurse_64, which darwin.c.o imports and where wm__os_process_info
#                and wm__os_file_regions are defined; wm__os_cached is darwin.c.o's, over
#                unix.c.o's mincore
#   no_malloc    of the library's objects only ledger.c.o (the counted allocator: blocks under
#                one page, counted) imports malloc or free; none imports calloc, realloc,
#                posix_memalign, aligned_alloc, valloc, strdup, a malloc_zone_* allocator or
#                C++'s operator new, so every loading path (model, plan, backends, readers,
#                parsers, converters, the OS layer) takes memory only from the counted allocator
#                and the Mach VM
#   no_linux     darwin.c.o is a member and linux.c.o is not; no cstring of the dylib or the CLI
#                holds "/proc"; neither imports a Linux or glibc name (syscall, getauxval,
#                malloc_trim, mallinfo2, strerrordesc_np, memfd_create, sched_getaffinity,
#                prctl, preadv2); and no compiled library source defines O_DIRECT or
#                MADV_POPULATE_* (the macOS headers have neither, so then no object can use them)
#   task_scope   darwin.c.o names objc_autoreleasePoolPush and objc_autoreleasePoolPop as
#                strings and imports dlsym, and nothing imports an objc_ symbol: the pool is
#                found at run time; the dylib, the CLI and the tests link libSystem alone (no
#                libobjc, no Foundation); host.c.o (the workers) and model.c.o (the release)
#                call wm__os_task_scope
#   probe        the CLI's probe.c.o calls wm_mem_figures_get and wm_mem_file_regions;
#                meter.c.o defines them over wm__os_process_info and wm__os_file_regions; and
#                the CLI imports the Darwin calls behind those (task_info, proc_pidinfo,
#                proc_pid_rusage, vm_region_recurse_64)
#   macho        the dylib, the CLI and every test program are Mach-O arm64 for macOS 11.0 or
#                later; the dylib is @rpath/libweightmap.1.dylib, exports the public wm_ API and
#                no wm__ internal
set -eu
check=$1
build=$2
src=$3
NM=${LLVM_NM:-llvm-nm}
OBJDUMP=${LLVM_OBJDUMP:-llvm-objdump}
lib="$build/libweightmap.a"
dylib="$build/libweightmap.1.dylib"
cli="$build/weightmap"
fails=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
ok() { echo "ok: $*"; }

# "member symbol" lines of the archive's undefined (imported) symbols
lib_imports() { "$NM" -A -u "$lib" | sed -E 's/^[^:]*:([^:]*): */\1 /'; }
# the members that define (T) a symbol
definers() { "$NM" -A --defined-only "$lib" | awk -v s="$1" '$NF == s && $(NF-1) == "T"' |
  sed -E 's/^[^:]*:([^:]*):.*/\1/' | sort -u | tr '\n' ' ' | sed 's/ $//'; }
imports() { "$NM" -u "$1" | awk '{print $NF}'; }
has_import() { imports "$1" | grep -qx "$2"; }
member_imports() { lib_imports | awk -v m="$1" -v s="$2" '$1 == m && $2 == s' | grep -q .; }

need_imports() { # file what symbols...
  f=$1
  what=$2
  shift 2
  for s in "$@"; do
    if has_import "$f" "$s"; then ok "$what imports $s"; else fail "$what does not import $s"; fi
  done
}

defined_in() { # symbol member
  d=$(definers "$1")
  if [ "$d" = "$2" ]; then ok "$1 is defined in $2 alone"; else fail "$1 is defined in '$d', not $2 alone"; fi
}

case $check in
pages)
  need_imports "$dylib" "the dylib" _vm_allocate _vm_deallocate
  for s in _vm_allocate _vm_deallocate; do
    if member_imports darwin.c.o $s; then ok "darwin.c.o imports $s"; else fail "darwin.c.o does not import $s"; fi
  done
  defined_in _wm__os_pages_alloc darwin.c.o
  defined_in _wm__os_pages_free darwin.c.o
  ;;
figures)
  need_imports "$dylib" "the dylib" _task_info _proc_pidinfo _proc_pid_rusage _vm_region_recurse_64
  for s in _task_info _proc_pidinfo _proc_pid_rusage _vm_region_recurse_64; do
    if member_imports darwin.c.o $s; then ok "darwin.c.o imports $s"; else fail "darwin.c.o does not import $s"; fi
  done
  defined_in _wm__os_process_info darwin.c.o
  defined_in _wm__os_file_regions darwin.c.o
  # the page cache: darwin.c's wm__os_cached over unix.c's mincore
  defined_in _wm__os_cached darwin.c.o
  if member_imports darwin.c.o _wm__unix_cached && member_imports unix.c.o _mincore; then
    ok "wm__os_cached calls unix.c's wm__unix_cached, which imports mincore"; else
    fail "wm__os_cached is not darwin.c's over unix.c's mincore"; fi
  ;;
no_malloc)
  banned='_calloc _realloc _reallocf _posix_memalign _aligned_alloc _valloc _strdup _strndup
    _malloc_zone_malloc _malloc_zone_calloc _malloc_zone_realloc _malloc_zone_memalign
    _malloc_zone_valloc'
  out=$(lib_imports | awk -v banned="$banned" '
    BEGIN { n = split(banned, b, /[ \n]+/); for (i = 1; i <= n; i++) if (b[i] != "") bad[b[i]] = 1 }
    ($2 == "_malloc" || $2 == "_free") && $1 != "ledger.c.o" { print $1 " imports " $2; next }
    ($2 in bad) || $2 ~ /^__Zn[wa]/ { print $1 " imports " $2 }')
  if [ -n "$out" ]; then
    echo "$out" | while IFS= read -r l; do echo "FAIL: $l" >&2; done
    fails=$((fails + 1))
  else
    ok "of $(ar t "$lib" | grep -c '\.o$') objects only ledger.c.o imports malloc/free; none imports another allocator or operator new"
  fi
  if member_imports ledger.c.o _malloc; then ok "ledger.c.o (the counted allocator) imports malloc"; else
    fail "ledger.c.o imports no malloc: this check no longer knows where small blocks come from"; fi
  ;;
no_linux)
  members=$(ar t "$lib")
  if echo "$members" | grep -qx darwin.c.o; then ok "darwin.c.o is in libweightmap.a"; else fail "darwin.c.o is not in libweightmap.a"; fi
  if echo "$members" | grep -qx linux.c.o; then fail "linux.c.o is in libweightmap.a"; else ok "linux.c.o is not in libweightmap.a"; fi
  for f in "$dylib" "$cli"; do
    if "$OBJDUMP" --macho --section=__TEXT,__cstring "$f" | grep -q '/proc'; then
      fail "$(basename "$f") holds a /proc string: $("$OBJDUMP" --macho --section=__TEXT,__cstring "$f" | grep '/proc' | head -3)"
    else ok "no /proc string in $(basename "$f")"; fi
    for s in _syscall _getauxval _malloc_trim _mallinfo2 _strerrordesc_np _strerrorname_np \
      _memfd_create _sched_getaffinity _prctl _preadv2 _posix_fadvise; do
      if has_import "$f" $s; then fail "$(basename "$f") imports $s"; fi
    done
    ok "$(basename "$f") imports no Linux or glibc call"
  done
  bad=$(while IFS= read -r s; do
    grep -HnE '^[[:space:]]*#[[:space:]]*define[[:space:]]+(O_DIRECT|MADV_POPULATE_[A-Z]+)\b' "$s" || true
  done <"$build/darwin-sources.txt")
  if [ -n "$bad" ]; then fail "a library source compiled for Darwin defines a Linux constant: $bad"; else
    ok "no compiled library source ($(wc -l <"$build/darwin-sources.txt") files) defines O_DIRECT or MADV_POPULATE_*"; fi
  ;;
task_scope)
  o="$build/CMakeFiles/weightmap_static.dir/src/os/darwin.c.o"
  strs=$("$OBJDUMP" --macho --section=__TEXT,__cstring "$o")
  for s in objc_autoreleasePoolPush objc_autoreleasePoolPop; do
    if echo "$strs" | grep -q "$s"; then ok "darwin.c.o names $s"; else fail "darwin.c.o does not name $s"; fi
  done
  if member_imports darwin.c.o _dlsym; then ok "darwin.c.o imports dlsym"; else fail "darwin.c.o does not import dlsym"; fi
  # where a scope is opened: each reading thread's task (src/read/crew.c) and every release
  # (model.c)
  for m in crew.c.o model.c.o; do
    if member_imports $m _wm__os_task_scope; then ok "$m runs its work in wm__os_task_scope"; else
      fail "$m does not call wm__os_task_scope"; fi
  done
  for f in "$dylib" "$cli" "$build"/tests/test_*; do
    [ -f "$f" ] || continue
    if imports "$f" | grep -q '^_objc_'; then fail "$(basename "$f") imports $(imports "$f" | grep '^_objc_' | tr '\n' ' ')"; fi
    libs=$("$OBJDUMP" --macho --dylibs-used "$f" | tail -n +2 | awk '{print $1}' | grep -v '^@rpath/libweightmap' || true)
    if [ "$libs" != /usr/lib/libSystem.B.dylib ]; then fail "$(basename "$f") links $(echo $libs)"; fi
  done
  ok "the dylib, the CLI and the tests import no objc_ symbol and link libSystem alone"
  ;;
probe)
  probe=$(grep '/probe\.c\.o$' "$build/darwin-cli-objects.txt")
  for s in _wm_mem_figures_get _wm_mem_file_regions; do
    if has_import "$probe" $s; then ok "probe.c.o calls $s"; else fail "probe.c.o does not call $s"; fi
    defined_in $s meter.c.o
  done
  for s in _wm__os_process_info _wm__os_file_regions; do
    if member_imports meter.c.o $s; then ok "meter.c.o calls $s"; else fail "meter.c.o does not call $s"; fi
  done
  need_imports "$cli" "the CLI" _task_info _proc_pidinfo _proc_pid_rusage _vm_region_recurse_64
  ;;
macho)
  for f in "$dylib" "$cli" "$build"/tests/test_*; do
    [ -f "$f" ] || continue
    h=$("$OBJDUMP" --macho --private-headers "$f")
    n=$(basename "$f")
    echo "$h" | grep -qE '^[[:space:]]*MH_MAGIC_64[[:space:]]+ARM64' || fail "$n is not Mach-O arm64"
    echo "$h" | grep -A4 LC_BUILD_VERSION | grep -qE 'platform (macos|1)$' || fail "$n is not for macOS"
    echo "$h" | grep -A4 LC_BUILD_VERSION | grep -qE 'minos 11\.0$' || fail "$n is not for macOS 11.0 on"
  done
  ok "the dylib, the CLI and $(ls "$build"/tests/test_* | wc -l) test programs are Mach-O arm64 for macOS 11.0"
  id=$("$OBJDUMP" --macho --private-headers "$dylib" | grep -A2 LC_ID_DYLIB | awk '/name/ {print $2}')
  if [ "$id" = @rpath/libweightmap.1.dylib ]; then ok "the dylib is $id"; else fail "the dylib's install name is $id"; fi
  exp=$("$OBJDUMP" --macho --exports-trie "$dylib" | awk '$2 ~ /^_/ {print $2}')
  if echo "$exp" | grep -qx _wm_file_open && echo "$exp" | grep -qx _wm_model_release; then
    ok "the dylib exports $(echo "$exp" | grep -c '^_wm_[a-z]') wm_ functions"; else fail "the dylib does not export the public API"; fi
  # What the objects say is what Apple's ld64 exports: an external symbol, never a private
  # external one (-fvisibility=hidden: N_PEXT, which ld64 turns local). Zig 0.12-dev's own
  # Mach-O linker exports private externals too, so its dylib's export trie also lists the
  # internals; that is the toolchain's, said here and in docs/PORTING.md, not the objects'.
  syms=$("$NM" -m --defined-only "$lib" | grep ' external ')
  pub=$(echo "$syms" | grep -v 'private external' | awk '{print $NF}')
  bad=$(echo "$pub" | grep -v '^_wm_[a-z]' || true)
  if [ -n "$bad" ]; then fail "the objects export what is not the public API: $(echo $bad | cut -c1-200)"; else
    ok "the objects' external symbols are the $(echo "$pub" | wc -l) wm_ API functions alone"; fi
  hid=$(echo "$syms" | grep 'private external' | awk '{print $NF}' | grep -c '^_wm__' || true)
  ok "$hid wm__ internals are private external in the objects"
  n=$(echo "$exp" | grep -c '^_wm__' || true)
  [ "$n" -eq 0 ] || echo "note: Zig's linker put $n private externals into the dylib's export trie (ld64 would not)"
  ;;
*)
  echo "check.sh: no check '$check'" >&2
  exit 2
  ;;
esac
[ "$fails" -eq 0 ]
