"""The campaign: `epcap run` drives the pipeline (harness/pipeline/) with a launcher over one
results directory (docs/spec.md#pipeline).

Rooms (docs/architecture.md):
  driver.py    scheduling, launch, finish, retries, bug stop, replay from events.jsonl
  store.py     the results directory: events, cell.json, TSV rebuild, campaign dirs
  state.py     `epcap status`
  preflight.py the static checks of every planned command
  progress.py  bars and the ETA
  dryrun.py    `epcap run --dry-run`
  cli.py       `epcap run` and `epcap status`
"""
