#!/bin/bash
# The libFuzzer harnesses (tests/fuzz, built by `make test` as VARIANT=fuzz with clang) replay
# their committed seeds, the seeds made from ../shared and every kept crash input
# (tests/fuzz/regress/), then fuzz for a few seconds each; any crash, leak, sanitizer report or
# broken contract fails. Long runs: `make fuzz FUZZ_SECONDS=N`.
exec ./tests/fuzz/run.sh check "${FUZZ_CHECK_SECONDS:-8}"
