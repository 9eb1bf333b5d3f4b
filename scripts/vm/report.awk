# Parses what the guest wrote (scripts/vm/init.sh) into one line per test:
#   PASS|FAIL|SKIP KERNEL MODE/BINARY::TEST [reason]
# then the failed tests' output, the probes' output, and a closing line
#   vm-KERNEL: N passed, N failed, N skipped
# Tests run single-threaded with --nocapture, so a test's output (a `SKIP ...` line from the
# harness's skip! macro, a panic message) comes between libtest's `test NAME ... ` and its
# `ok` / `FAILED` / `ignored`. A binary that ended without a result for its running test
# (crash, per-binary time limit) fails that test; a guest that never printed `@@ END` (time
# limit, panic) fails the binaries it did not finish.
# Variables: kernel (the id), planned (file of "MODE BINARY" lines the guest should run).
function finish(result, why,    key) {
    key = mode "/" bin "::" cur
    if (result == "ok" && skipped != "") { result = "skip"; why = skipped }
    if (result == "ok") { npass++; print "PASS " kernel " " key }
    else if (result == "skip") { nskip++; print "SKIP " kernel " " key (why == "" ? "" : " (" why ")") }
    else { nfail++; print "FAIL " kernel " " key (why == "" ? "" : " (" why ")"); failed = failed "\n--- " key " ---" buf }
    cur = ""; buf = ""; skipped = ""
}
BEGIN {
    while ((getline l < planned) > 0) { nplan++; plan[nplan] = l }
}
{ sub(/\r$/, "") }
/^@@ BEGIN / { print "guest kernel " $3; next }
/^@@ NOTE / { sub(/^@@ NOTE /, ""); print "note: " $0; next }
/^@@ PARAM / { next }
/^@@ RUN / { mode = $3; bin = $4; cur = ""; started[mode " " bin] = 1; next }
/^@@ EXIT / {
    if (cur != "") finish("FAILED", "the test binary ended during this test (exit " $5 ")")
    else if ($5 != 0 && !ran_any && mode != "probe") { cur = "(binary)"; finish("FAILED", "exit " $5 " before any test ran") }
    else if ($5 != 0 && mode == "probe") { cur = "(probe)"; finish("FAILED", "exit " $5) }
    done[mode " " bin] = 1; ran_any = 0; bin = ""; next
}
/^@@ END/ { ended = 1; next }
mode == "probe" && bin != "" { probes = probes "\n" $0; next }
/^test .* \.\.\. / {
    if (cur != "") finish("FAILED", "no result line")
    line = $0
    cur = $2; ran_any = 1
    rest = line; sub(/^test [^ ]* \.\.\. /, "", rest)
    if (rest == "ok" || rest == "FAILED" || rest == "ignored") { finish(rest, ""); next }
    if (rest ~ /^SKIP /) { skipped = rest; sub(/^SKIP [^ ]*: /, "", skipped) }
    if (rest != "") buf = buf "\n" rest
    next
}
cur != "" && ($0 == "ok" || $0 == "FAILED" || $0 == "ignored") { finish($0 == "ignored" ? "skip" : $0, ""); next }
cur != "" && /^SKIP / { skipped = $0; sub(/^SKIP [^ ]*: /, "", skipped) }
cur != "" { buf = buf "\n" $0 }
END {
    if (cur != "") finish("FAILED", "the guest stopped during this test")
    for (i = 1; i <= nplan; i++) {
        if (!(plan[i] in done)) {
            split(plan[i], p, " "); mode = p[1]; bin = p[2]; cur = "(not run)"
            finish("FAILED", ended ? "the guest skipped it" : "the guest stopped before it finished (time limit or crash)")
        }
    }
    if (probes != "") print "probe output:" probes
    if (failed != "") print "output of the failed tests:" failed
    printf "vm-%s: %d passed, %d failed, %d skipped\n", kernel, npass, nfail, nskip
    exit nfail > 0 ? 1 : 0
}
