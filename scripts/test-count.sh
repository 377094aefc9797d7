# shellcheck shell=bash
# Counting of a test log for scripts/test: sourced, never run. Kept apart so that
# tests/test_counter.rs can feed it sample logs.
#
# count_cargo_log LOG prints "PASSED FAILED SKIPPED" for a `cargo test` log:
# - per test binary (each starts at cargo's "Running ..." or "Doc-tests ..." line) only
#   its last "test result:" line counts, libtest's own summary;
# - a test that did not check its subject says so on a line
#   "SKIPPED: <test>: <reason>" (tests/support/skip.rs), at a line's start or right
#   after libtest's "test <name> ... "; each test so named counts once per binary as
#   skipped instead of passed;
# - a nested run's output (a test re-running its binary, e.g. as nobody) is shown
#   indented with a prefix, so none of its lines match and nothing in it is counted.
count_cargo_log() {
	awk '
		function flush(   n, k) {
			n = 0
			for (k in skipped) n++
			if (n > bp) n = bp
			p += bp - n; f += bf; s += n
			bp = 0; bf = 0
			split("", skipped)
		}
		/^ *(Running|Doc-tests) / { flush() }
		/^test result:/ { bp = 0; bf = 0
			for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) bp = $i; if ($(i+1) ~ /^failed/) bf = $i } }
		match($0, /(^|^test .* \.\.\. )SKIPPED: [^: ]+:/) {
			name = substr($0, RSTART, RLENGTH - 1)
			sub(/.*SKIPPED: /, "", name)
			skipped[name] = 1
		}
		END { flush(); printf "%d %d %d\n", p, f, s }' "$1"
}

# count_smoke_log LOG [NAME] prints "PASSED FAILED" from a "NAME: N passed, M failed" summary line (NAME:
# qemu-smoke by default; scripts/fuzz smoke prints fuzz-smoke).
count_smoke_log() {
	local line name="${2:-qemu-smoke}"
	line="$(grep -E "^$name: [0-9]+ passed, [0-9]+ failed" "$1" | tail -1 || true)"
	if [ -z "$line" ]; then
		echo "0 0"
		return 0
	fi
	line="${line#"$name": }"
	local passed="${line%% passed*}"
	line="${line#*, }"
	echo "$passed ${line%% failed*}"
}
