"""The campaign: the staged pipeline of docs/spec.md (pipeline) over one results directory.

Rooms (docs/architecture.md):
  stages.py    the stage table -- the one order of stages, purposes and backends from which
               the dry-run plan, progress, ETA, --stage/--until and the pipeline are derived
  decisions.py per-model pure decisions (measure, select, validate, time) as generators
  driver.py    scheduling, launch, finish, retries, bug stop
  analysis.py  one finished run -> status, summary, timing and its attempts row
  store.py     the results directory: events, cell.json, TSV rebuild, campaign dirs
  dryrun.py    `epcap run --dry-run`
  cli.py       `epcap run` and `epcap status`

Kept import-free so `harness.campaign.stages` loads without the driver.
"""
