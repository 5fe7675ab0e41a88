"""The pipeline's decisions, in one home (docs/architecture.md#the-audit-is-the-pipeline-replayed).

  stages.py    the stage table: the one order of stages, purposes and backends from which
               the dry-run plan, progress, ETA, --stage/--until and the pipeline are derived
  decisions.py per-model decisions (measure, select, validate, frontier, time) as generators that
               yield requests and receive outcomes
  analysis.py  one finished run's evidence -> its outcome (status, summary, timing, row)
  replay.py    drive the model pipelines with an answering source, synchronously
  version.py   ANALYSIS_VERSION: the version of these definitions (docs/analysis-versions.md)

`epcap run` (harness/campaign/) drives these generators with a launcher; `epcap audit`
(harness/audit/) drives the same generators with the upload's cells as the source and
compares the tables they produce with the upload's. Kept import-free.
"""
