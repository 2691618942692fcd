#!/bin/bash
set -e
# ANSWER_WORD comes from [solution.env]; it is empty if that section was ignored.
printf '%s\n' "${ANSWER_WORD:-}" > /root/word.txt
# What the oracle saw of the verifier's variables: they must not reach it.
printf '%s\n' "${EXPECTED-unset}" > /root/oracle-saw-expected.txt
