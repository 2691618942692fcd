"""Software-engineering envs: repository tasks graded by their own tests (SWE-bench format),
and bug localization scored against the gold patch.

Built so far: SWE-bench-format instances (`instances`), `resolved` by the swebench
package's grader (`grading`), patches read in memory (`diffs`), localization scores
(`localization`), the agents' file editor (`editor`), planted bugs (`mutations`) and
swe-synth's task generator over a test runner (`synth`). The envs (`swe`, `swe-synth`) are
registered here once they exist.
"""
