# Cross-building for ARM64 Linux with Debian's cross compilers, against Debian's arm64 runtime
# (multiarch: /usr/lib/aarch64-linux-gnu, `dpkg --add-architecture arm64`), arm64 packages unpacked in
# AARCH64_PACKAGES (sentencepiece, which cannot be installed beside the host's) and the aarch64
# ExecuTorch wheel (executorch_DIR at its share/cmake). `./dev runner --arch aarch64` uses it.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# pkg-config reads the arm64 packages' .pc files, not the host's
if(AARCH64_PACKAGES)
  set(ENV{PKG_CONFIG_SYSROOT_DIR} "${AARCH64_PACKAGES}")
  set(ENV{PKG_CONFIG_LIBDIR} "${AARCH64_PACKAGES}/usr/lib/aarch64-linux-gnu/pkgconfig")
endif()
