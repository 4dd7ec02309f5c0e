#!/usr/bin/env bash
# Builds the GPU-host archive (//release:gpu_bundle): make_bundle.sh OUT.tar.xz SCRIPT README
# --tests BIN... --bench BIN... --scripts FILE... --bin BIN... . Copies the binaries and, found with ldd, the shared libraries
# they need except the C library's own (libc, libm, libdl, libpthread, librt, ld-linux: the
# host's must be used), the CUDA driver and cuBLAS/cuDNN/NCCL (the host's); the CUDA runtime
# goes to lib/cuda-fallback, used only when the host has none.
set -euo pipefail
out=$1 script=$2 readme=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
root="$dir/kiln_gpu_bundle"
mkdir -p "$root/tests" "$root/bench" "$root/scripts" "$root/bin" "$root/lib/cuda-fallback"
kind=tests
for f in "$@"; do
  case "$f" in
    --tests) kind=tests; continue ;;
    --bench) kind=bench; continue ;;
    --scripts) kind=scripts; continue ;;
    --bin) kind=bin; continue ;;
  esac
  cp "$f" "$root/$kind/"
  [ "$kind" = scripts ] && continue  # Python: nothing to link
  ldd "$f" | awk '/=>/ && $3 ~ /^\// {print $3}' | while read -r lib; do
    base=$(basename "$lib")
    case "$base" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*) ;;
      # Hundreds of MB each: GPU hosts have their own (toolkit or Python wheels).
      libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*) ;;
      libcudart.so*) cp -L "$lib" "$root/lib/cuda-fallback/" ;;
      *) cp -L "$lib" "$root/lib/" ;;
    esac
  done
done
cp "$script" "$root/run_gpu_tests.sh"
cp "$readme" "$root/README.md"
chmod +x "$root/run_gpu_tests.sh" "$root"/tests/* "$root"/bench/* "$root"/bin/* 2>/dev/null || true
# The newest glibc symbol version the binaries need: the host's glibc must be at least that.
need=$(objdump -T "$root"/tests/* "$root"/bench/* "$root"/bin/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 || true)
echo "needs ${need:-unknown} or newer (ldd --version on the host)" > "$root/GLIBC_REQUIRED"
# Every binary links the same CUDA kernels (a ~10 MB fatbin each): xz with a window larger than one
# binary stores them once (about 530 MB of binaries -> ~15 MB; gzip's 32 KB window gave 88 MB).
tar -C "$dir" -cf - kiln_gpu_bundle | xz -6 --lzma2=preset=6,dict=64MiB -T1 > "$out"
