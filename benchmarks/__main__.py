"""`python -m benchmarks`: regenerate the README's performance table from the recorded
results in benchmarks/results/ (each benchmark runs on its own: `python -m benchmarks.NAME`)."""

from benchmarks._readme import update

print("README table updated" if update() else "README table already up to date")
