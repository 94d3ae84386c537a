# Reads `cargo test` output on stdin and prints it again, with two changes:
# - a test that skipped itself (recorded by rtcell-testkit in the file `skips`, one line per skip:
#   binary stem, TAB, test name, TAB, reason) shows as "skipped: REASON", never as "ok"; one that
#   skipped a part of itself (reason "part: ...") shows as ok with the part named;
# - each binary's "test result:" line counts those skips apart from the passed tests;
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
    bin_skipped = 0
}

/^test .* \.\.\. ok$/ {
    name = $0
    sub(/^test /, "", name); sub(/ \.\.\. ok$/, "", name)
    key = bin "\t" name
    if (!(key in reason)) load_skips()
    if ((key in reason) && reason[key] ~ /^part: /) {
        print "test " name " ... ok, but skipped " reason[key]
        passed++
        listed[++nlisted] = bin ": " name ": " reason[key]
        next
    }
    if (key in reason) {
        print "test " name " ... skipped: " reason[key]
        skipped++
        bin_skipped++
        listed[++nlisted] = bin ": " name ": " reason[key]
        next
    }
    passed++
}
/^test .* \.\.\. FAILED$/ { failed++ }
# The harness counts a skipped test as passed: its line says how many of those were skips.
/^test result: / && bin_skipped {
    line = $0
    n = line; sub(/^test result: [a-zA-Z]+\. /, "", n); sub(/ passed.*/, "", n)
    sub(/[0-9]+ passed;/, (n - bin_skipped) " passed; " bin_skipped " skipped;", line)
    print line
    bin_skipped = 0
    next
}
# An ignored test whose reason starts "finding:" is a known, unfixed problem: listed apart, never hidden.
/^test .* \.\.\. ignored, finding/ { findings[++nfindings] = bin ": " substr($0, 6); next_is_finding = 1 }
/^test .* \.\.\. ignored/ { if (!next_is_finding) ignored++; next_is_finding = 0 }
# A build that failed: no test of that crate ran, which the closing line must say.
/^error: could not compile / { build_failed++ }
{ print; fflush() }

END {
    print ""
    if (nlisted) {
        print "Skipped here (each would be a failure with CI set):"
        for (i = 1; i <= nlisted; i++) print "  - " listed[i]
    } else {
        print "Skipped here: none."
    }
    if (ignored) print ignored " tests ignored by design (benchmarks and helpers: run them with --ignored)."
    if (nfindings) {
        print "Known findings, not fixed (ignored tests that fail today):"
        for (i = 1; i <= nfindings; i++) print "  - " findings[i]
    }
    print "tests: " passed + 0 " passed, " failed + 0 " failed, " skipped + 0 " skipped" \
        (build_failed ? "; BUILD FAILED (" build_failed " crate(s) did not compile: their tests did not run)" : "")
}
