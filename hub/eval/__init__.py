"""Evaluation: run agents on envs, score the runs, report and compare them.

    from skyhub.eval.agents import load_agent
    from skyhub.eval.harness import run
    from skyhub.eval.report import write_report
    summary, episodes = run("toy-lookup", load_agent("oracle"), n=100, out="runs/oracle")
    write_report("runs/oracle")

One concept per module:
- `harness`: `run`, the concurrent eval loop that records every episode;
- `rundir`: the run directory it writes (run.json, episodes.jsonl, summary.json) and reads;
- `agents`: the `Agent` interface, the built-ins and `load_agent`; `openai_agent`: any
  OpenAI-compatible chat endpoint;
- `metrics`: every figure of a run, defined once (accuracy and its Wilson interval, mean
  reward and its own, infra errors, turns, tokens), used by summaries, reports and comparisons;
- `breakdown`: slices, turns used, the error taxonomy; `render`: markdown and HTML;
  `plots`: PNGs; `report`: the run and suite reports built from those;
- `compare`: paired comparisons of runs; `suites`: named sets of runs with published numbers;
- `replay`: recorded episodes played again on a fresh env (`skyhub replay`, and `skyhub
  check`'s replay check); `view`: the local web viewer of runs (`skyhub view`).

Import the module you need: this package imports nothing (`skyhub eval` loads only what a
command uses).
"""
