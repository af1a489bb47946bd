# scripts/gpu_env.sh: sourced by the GPU scripts (bench/gpu.sh, gpu_ab.sh, python_gpu.sh,
# multigpu.sh). The GPU machines lack some Debian packages the build needs and reach no
# registry: wm_gpu_env unpacks
# the .deb files of folder $1 (fill it here with `apt-get download NAME...`; see each script)
# into /tmp/wm-deps and points pkg-config and the loader at them when the machine has no
# libcjson. It sets the arrays `cm` (CMake arguments) and `gen` (the generator: Ninja where
# there is one) and says which libcjson it uses.
wm_gpu_env() {
    local deps=$1 d=/tmp/wm-deps f pc
    cm=()
    gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    mkdir -p $d
    for f in "$deps"/*.deb; do [ -f "$f" ] && dpkg -x "$f" $d; done
    if ! pkg-config --exists libcjson 2>/dev/null; then
        pc=$d/usr/lib/x86_64-linux-gnu/pkgconfig/libcjson.pc
        sed -i "s|^libdir=.*|libdir=$d/usr/lib/x86_64-linux-gnu|; s|^includedir=.*|includedir=$d/usr/include|" $pc
        export PKG_CONFIG_PATH=$d/usr/lib/x86_64-linux-gnu/pkgconfig
        export LD_LIBRARY_PATH=$d/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        command -v pkg-config >/dev/null || cm+=(-DPKG_CONFIG_EXECUTABLE=$d/usr/bin/pkgconf)
        echo "using libcjson from $deps ($d)"
    fi
}
