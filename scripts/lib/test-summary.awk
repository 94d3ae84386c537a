# Reads `cargo test` output on stdin and prints it again, with two changes:
# - a test that skipped itself (recorded by rtcell-testkit in the file `skips`, one line per skip:
#   binary stem, TAB, test name, TAB, reason) shows as "skipped: REASON", never as "ok";
# - at the end, the list of skipped tests with their reasons, and one closing line
#   "tests: N passed, N failed, N skipped".
# Usage: cargo test ... 2>&1 | awk -v skips=FILE -f scripts/lib/test-summary.awk

function load_skips(    line, f) {
    delete reason
    while ((getline line < skips) > 0) {
        split(line, f, "\t")
        reason[f[1] "\t" f[2]] = f[3]
    }
    close(skips)
}

# "     Running tests/loads.rs (target/release/deps/loads-0123abcd)": the binary's file stem.
/^ *Running / {
    bin = $0
    sub(/.*\(/, "", bin); sub(/\).*/, "", bin); sub(/.*\//, "", bin)
}

/^test .* \.\.\. ok$/ {
    name = $0
    sub(/^test /, "", name); sub(/ \.\.\. ok$/, "", name)
    key = bin "\t" name
    if (!(key in reason)) load_skips()
    if (key in reason) {
        print "test " name " ... skipped: " reason[key]
        skipped++
        listed[skipped] = bin ": " name ": " reason[key]
        next
    }
    passed++
}
/^test .* \.\.\. FAILED$/ { failed++ }
/^test .* \.\.\. ignored/ { ignored++ }
{ print; fflush() }

END {
    print ""
    if (skipped) {
        print "Skipped here (each would be a failure with CI set):"
        for (i = 1; i <= skipped; i++) print "  - " listed[i]
    } else {
        print "Skipped here: none."
    }
    if (ignored) print ignored " tests ignored by design (benchmarks and helpers: run them with --ignored)."
    print "tests: " passed + 0 " passed, " failed + 0 " failed, " skipped + 0 " skipped"
}
