# toolchain-aarch64.cmake: cross-builds for 64-bit ARM Linux (AArch64) with Debian's toolchain,
# run under qemu-user. `make arm64` uses it (build-arm64/); scripts/deps.sh arm64 installs what it
# needs: gcc-aarch64-linux-gnu, qemu-user and libc6:arm64 (multiarch), after
# `dpkg --add-architecture arm64`.
#
# The :arm64 libraries live in Debian's multiarch folders (/usr/lib/aarch64-linux-gnu), which
# Debian's cross gcc searches; pkg-config is pointed at their .pc files only, so that no host
# (x86-64) library is picked up. Tests and any other target run through
# CMAKE_CROSSCOMPILING_EMULATOR (ctest does that; the tests that start the CLI use the
# weightmap-emu wrapper tests/CMakeLists.txt writes).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# qemu-aarch64 finds the arm64 loader and libc where libc6:arm64 put them (/lib/ld-linux-aarch64.so.1,
# /usr/lib/aarch64-linux-gnu).
find_program(WM_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${WM_QEMU_AARCH64})
