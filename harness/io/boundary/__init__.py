"""One boundary per kind of input (docs/reliability.md: boundaries).

Everything that enters epcap from outside crosses one of these modules, which turn it into
typed values of a declared range, unit and encoding, and raise `BadInput(file, line, field,
why)` (exit 2) for anything else -- never a traceback, never a hang:

  text        strings of every input kind: no NUL, no lone surrogate, no control character
  values      command-line values and runbook numbers: integers and lists within a range
  events      events.jsonl records: each known field's type, range and unit
  logs        rank logs and traces: one bounded, non-blocking line reader for every command
  campaigns   campaign directories under a results root, recognised by the record epcap wrote
  paths       relative runbook paths (against the runbook's folder), writes kept under --results
  hub         links of a Hugging Face Hub cache snapshot: which are the repository's own files
  tools       external tools (git, nvidia-smi): output decoded, each failure named as such
"""
