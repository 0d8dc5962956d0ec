#!/usr/bin/env bash
# The system packages the tests need, installed where missing (Debian 12
# and its derivatives, through apt-get, as root or through sudo). A no-op
# that takes a second where everything is present. Without root or sudo it
# prints the apt-get line to run and exits non-zero.
#
#   cmake gcc g++ make pkg-config   the build
#   libcmocka-dev                   the C test suite
#   clang libclang-rt-14-dev        the sanitizer build (ASan + UBSan runtimes)
#   libomp-dev                        and the libFuzzer target; OpenMP for clang
#   python3 python3-venv            the Python tests' virtual environment
#   python3-dev                     headers torch.compile's C++ code generation includes
#   ca-certificates                 HTTPS to PyPI (torch and the test tools)
#
# --check: only report what is missing (exit 1 if anything is).
set -uo pipefail

PACKAGES=(cmake gcc g++ make pkg-config libcmocka-dev clang libclang-rt-14-dev libomp-dev
          python3 python3-venv python3-dev ca-certificates)

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "install_deps: not a Debian-like system (no dpkg-query / apt-get); the tests need:" \
         "${PACKAGES[*]} (or their equivalents)" >&2
    exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "install_deps: every system package the tests need is installed"
    exit 0
fi
line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "${1:-}" = "--check" ]; then
    echo "install_deps: missing: ${missing[*]} (install with: $line)" >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1 && { sudo -n true 2>/dev/null || [ -t 0 ]; }; then
    SUDO=(sudo)
else
    echo "install_deps: missing system packages: ${missing[*]}" >&2
    echo "install_deps: this needs root or sudo; run as root:" >&2
    echo "    apt-get update && $line" >&2
    exit 1
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update &&
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
