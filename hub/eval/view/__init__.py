"""`skyhub view RUN [RUN...]`: browse eval and training runs in a local web page.

- `data`: what the page shows, read from run directories (the per-task table and its
  filters, trajectories, comparisons, training curves), as plain JSON-ready data;
- `app`: the FastAPI app serving that as a JSON API, with the page in `static/` (HTML, JS
  and CSS, no build step).

Import the module you need: this package imports nothing (FastAPI loads only for `view`).
"""
