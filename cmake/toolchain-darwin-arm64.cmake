# toolchain-darwin-arm64.cmake: cross-builds for macOS on Apple silicon (Mach-O arm64, macOS 11
# and later) with Zig's toolchain from npm: `zig cc -target aarch64-macos.11.0` compiles against
# the macOS headers Zig ships and links against its libSystem.tbd (no Apple SDK, no Mac needed).
# `make darwin` uses it (build-darwin/); scripts/zig.sh installs the toolchain into a cache
# outside the clone and writes the three scripts this file names (wm-bin/aarch64-macos-cc, -ar,
# -ranlib). Pass -DWM_ZIG_BIN=that folder; `make darwin` does.
#
# What is built cannot run here: there is no emulator for Darwin, so ctest runs no Darwin
# program; the checks of what was built (tests/darwin/, label darwin) read the objects with
# llvm-nm and llvm-objdump instead (docs/PORTING.md).
set(CMAKE_SYSTEM_NAME Darwin)
set(CMAKE_SYSTEM_PROCESSOR arm64)
set(CMAKE_SYSTEM_VERSION 20.0) # Darwin 20: macOS 11 (CMake enables @rpath install names from 9.0 on)
if(NOT WM_ZIG_BIN AND DEFINED ENV{WM_ZIG_BIN})
  set(WM_ZIG_BIN "$ENV{WM_ZIG_BIN}")
endif()
if(NOT WM_ZIG_BIN OR NOT EXISTS "${WM_ZIG_BIN}/aarch64-macos-cc")
  message(FATAL_ERROR "toolchain-darwin-arm64: -DWM_ZIG_BIN=DIR must name the folder of "
    "aarch64-macos-cc, -ar and -ranlib that scripts/zig.sh writes (got '${WM_ZIG_BIN}')")
endif()
# try_compile projects read this file again: hand them the folder
set(ENV{WM_ZIG_BIN} "${WM_ZIG_BIN}")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES WM_ZIG_BIN)
set(CMAKE_C_COMPILER "${WM_ZIG_BIN}/aarch64-macos-cc")
set(CMAKE_AR "${WM_ZIG_BIN}/aarch64-macos-ar" CACHE FILEPATH "")
set(CMAKE_RANLIB "${WM_ZIG_BIN}/aarch64-macos-ranlib" CACHE FILEPATH "")
# The target is in the compiler's -target; no -arch, no -isysroot, no -mmacosx-version-min from
# CMake (Zig's clang gets all three from -target).
set(CMAKE_OSX_ARCHITECTURES "" CACHE STRING "")
set(CMAKE_OSX_SYSROOT "" CACHE PATH "")
set(CMAKE_OSX_DEPLOYMENT_TARGET "" CACHE STRING "")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
