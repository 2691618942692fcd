"""These folders are task data, not skyhub tests: tests/test_outputs.py in a task runs inside
the task's container, so pytest must not collect anything here."""

collect_ignore_glob = ["*"]
