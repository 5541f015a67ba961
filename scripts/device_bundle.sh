#!/usr/bin/env bash
# Prepares what scripts/device_check.sh needs on a bare GPU machine that has CUDA, cuDNN, NCCL, PyTorch and CMake
# but none of our Debian packages and no network: the headers and libraries of OpenBLAS, HDF5 (with the shared
# libraries they load), nlohmann/json and GoogleTest, and cudnn-frontend's headers, copied from this machine (after
# scripts/setup.sh) into one compressed archive, .device-bundle/bundle.tar.gz (gitignored; about 20 MB), with a
# MANIFEST naming the version of each part (device_check.sh prints it at its start).
#
#   scripts/device_bundle.sh            # writes .device-bundle/bundle.tar.gz
#
# The libraries are Debian 12's (glibc 2.36), so they load on any newer x86-64 Linux. glibc, libstdc++, libgcc
# and libgomp come with the target's compiler and are not copied.
set -euo pipefail
cd "$(dirname "$0")/.."

out=.device-bundle
stage=$out/stage
rm -rf "$stage"
mkdir -p "$stage"/{include,lib,share/cmake}

need() {  # need PATH: a file this script copies
  [ -e "$1" ] || { echo "device_bundle: $1 is missing (run scripts/setup.sh first)" >&2; exit 1; }
}

multiarch=/usr/lib/x86_64-linux-gnu
# OpenBLAS (pthread build) and its headers.
need $multiarch/openblas-pthread/libopenblas.so.0
cp -L $multiarch/openblas-pthread/libopenblas.so.0 "$stage/lib/"
ln -s libopenblas.so.0 "$stage/lib/libopenblas.so"
mkdir -p "$stage/include/openblas"
cp -L /usr/include/x86_64-linux-gnu/openblas-pthread/*.h "$stage/include/openblas/"
# HDF5 (serial) and its headers; CMake's FindHDF5 looks for libhdf5.so.
need $multiarch/libhdf5_serial.so.103
cp -L $multiarch/libhdf5_serial.so.103 "$stage/lib/"
ln -s libhdf5_serial.so.103 "$stage/lib/libhdf5.so"
cp -L /usr/include/hdf5/serial/*.h "$stage/include/"
# Every shared library those two load, except the C runtime and the compiler's own.
base='^(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64|libgcc_s|libstdc\+\+|libgomp|linux-vdso)\.'
ldd "$stage/lib/libopenblas.so.0" "$stage/lib/libhdf5_serial.so.103" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  sort -u | while read -r name path; do
    if ! [[ $name =~ $base ]]; then cp -L "$path" "$stage/lib/$name"; fi
  done
# nlohmann/json (headers and its CMake package, which finds its headers relative to itself).
need /usr/include/nlohmann/json.hpp
cp -rL /usr/include/nlohmann "$stage/include/"
cp -rL /usr/share/cmake/nlohmann_json "$stage/share/cmake/"
# GoogleTest (static libraries and headers; CMake's FindGTest reads GTEST_ROOT).
need $multiarch/libgtest.a
cp -L $multiarch/libgtest.a $multiarch/libgtest_main.a $multiarch/libgmock.a $multiarch/libgmock_main.a "$stage/lib/"
cp -rL /usr/include/gtest /usr/include/gmock "$stage/include/"
# cudnn-frontend's headers, from the pinned pip package in .venv.
frontend=$(ls -d .venv/lib/python3*/site-packages/include 2>/dev/null | head -1)
need "$frontend/cudnn_frontend.h"
# Its headers include each other as ../include/..., so the folder keeps the name include.
mkdir -p "$stage/cudnn-frontend/include"
cp -rL "$frontend"/. "$stage/cudnn-frontend/include/"

# The frontend must be the version requirements.txt pins (the one the CUDA backend is written and checked against).
pinned=$(sed -n 's/^nvidia-cudnn-frontend==\([0-9.]*\).*/\1/p' requirements.txt)
bundled=$(awk '/define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION/ {printf "%s%s", sep, $3; sep="."}' \
  "$stage/cudnn-frontend/include/cudnn_frontend_version.h")
if [ "$bundled" != "$pinned" ]; then
  echo "device_bundle: .venv has cudnn-frontend $bundled, requirements.txt pins $pinned (run scripts/setup.sh)" >&2
  exit 1
fi
debian() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo '?'; }
{
  echo "cudnn-frontend $bundled"
  echo "openblas $(debian libopenblas0-pthread)"
  echo "hdf5 $(debian libhdf5-103-1)"
  echo "nlohmann-json $(debian nlohmann-json3-dev)"
  echo "googletest $(debian libgtest-dev)"
} > "$stage/MANIFEST"

tar -C "$stage" -czf "$out/bundle.tar.gz" .
rm -rf "$stage"
echo "device_bundle: $out/bundle.tar.gz ($(du -h "$out/bundle.tar.gz" | cut -f1))"
