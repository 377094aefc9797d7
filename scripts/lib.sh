# shellcheck shell=bash disable=SC2034 # variables here are used by the scripts that source this file
# Shared helpers for pincer's scripts: sourced, never run. Owns logging, the
# repository paths and the pinned tool locations; it installs nothing itself.

PINCER_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PINCER_ROOT

# Tools installed by scripts/setup live under .tools/ (gitignored).
PINCER_TOOLS="$PINCER_ROOT/.tools"
NODE24_VERSION="24.21.0"
NODE24_BIN="$PINCER_TOOLS/node24/node_modules/.bin/node"
OPENCLAW_CLI_DIR="$PINCER_TOOLS/openclaw-cli"
OPENCLAW_CLI_ENTRY="$OPENCLAW_CLI_DIR/node_modules/openclaw/openclaw.mjs"
CLIENTS_DIR="$PINCER_ROOT/tests/clients"
# avahi-daemon and avahi-browse for the mDNS discovery test (scripts/setup mdns), extracted, not installed.
AVAHI_DIR="$PINCER_TOOLS/avahi"
# The real homeserver of tests/matrix_synapse.rs (scripts/setup synapse).
SYNAPSE_VERSION="1.163.2"
SYNAPSE_PYTHON="$PINCER_TOOLS/synapse/bin/python"

# Memory search assets (scripts/setup memory): ONNX Runtime library + embedding model, installed where the
# pincer binary looks for them by default (src/memory/embedder.rs: ~/.local/share/pincer/onnx), so the
# gateway and the CLI use them with no PINCER_* variable set.
ONNX_DIR="${XDG_DATA_HOME:-${HOME:-/root}/.local/share}/pincer/onnx"
ONNXRUNTIME_VERSION="1.31.1"
ONNXRUNTIME_LIB="$ONNX_DIR/lib/libonnxruntime.so.$ONNXRUNTIME_VERSION"
EMBED_MODEL_DIR="$ONNX_DIR/all-MiniLM-L6-v2"
# The aarch64 build of the same library, for the appliance image (scripts/setup image).
ONNXRUNTIME_LIB_AARCH64="$ONNX_DIR/aarch64/libonnxruntime.so.$ONNXRUNTIME_VERSION"

# Where cargo puts binaries; honours CARGO_TARGET_DIR like cargo does.
PINCER_TARGET_DIR="${CARGO_TARGET_DIR:-$PINCER_ROOT/target}"

# The Pi targets this project cross-builds, and their Debian toolchain names.
PINCER_CROSS_TARGETS=(aarch64-unknown-linux-gnu armv7-unknown-linux-gnueabihf aarch64-unknown-linux-musl)

log() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

# `sudo` only when not already root (CI and the target machines run as root).
as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root for: $*"
	fi
}

# Debian triple prefix of the cross gcc/binutils for a Rust target.
cross_gcc_prefix() {
	case "$1" in
	aarch64-unknown-linux-gnu | aarch64-unknown-linux-musl) echo aarch64-linux-gnu ;;
	armv7-unknown-linux-gnueabihf) echo arm-linux-gnueabihf ;;
	*) return 1 ;;
	esac
}

# qemu-user binary and sysroot for running a cross-built binary on x86_64.
qemu_for_target() {
	case "$1" in
	aarch64-unknown-linux-gnu) echo "qemu-aarch64-static -L /usr/aarch64-linux-gnu" ;;
	aarch64-unknown-linux-musl) echo "qemu-aarch64-static" ;;
	armv7-unknown-linux-gnueabihf) echo "qemu-arm-static -L /usr/arm-linux-gnueabihf" ;;
	*) return 1 ;;
	esac
}

is_cross_target() {
	local t
	for t in "${PINCER_CROSS_TARGETS[@]}"; do
		[ "$t" = "$1" ] && return 0
	done
	return 1
}

# Seconds since the epoch with a fraction, for step timings in summaries.
now_s() { date +%s.%N; }
elapsed_since() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.0f", b - a }'; }

# Makes, once, a CA and a bundle-signing certificate it issued in DIR (ca.cert.pem,
# signing.cert.pem, signing.key.pem; the CA key stays beside them): for development images
# and tests only. NAME goes into the certificates' subjects.
make_signing_ca() {
	local dir="$1" name="$2"
	[ -s "$dir/signing.key.pem" ] && return 0
	mkdir -p "$dir"
	chmod 700 "$dir"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
		-subj "/O=$name/CN=$name CA" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
		-keyout "$dir/ca.key.pem" -out "$dir/ca.cert.pem" 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-subj "/O=$name/CN=$name signing" \
		-keyout "$dir/signing.key.pem" -out "$dir/signing.csr.pem" 2>/dev/null
	openssl x509 -req -in "$dir/signing.csr.pem" -CA "$dir/ca.cert.pem" -CAkey "$dir/ca.key.pem" \
		-CAcreateserial -days 3650 \
		-extfile <(printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n') \
		-out "$dir/signing.cert.pem" 2>/dev/null
	[ -s "$dir/signing.cert.pem" ] || die "could not make the signing CA in $dir"
}
