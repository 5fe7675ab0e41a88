"""The analysis version: one number for the definitions an upload's tables are made with.

`ANALYSIS_VERSION` is bumped whenever a decision of the pipeline (measure, select, validate,
time: harness/pipeline/decisions.py) or the definition of a statistic it writes (a run's
outcome, harness/pipeline/analysis.py; a timing figure, harness/timing/) changes, so that the
same cells would give other tables. Each bump has its entry in docs/analysis-versions.md
(tests/unit/test_analysis_version.py holds the two together). `epcap run` records it in every
provenance.txt beside `harness.commit` (`analysis_version: N`); `epcap audit` replays the
pipeline on an upload only where the upload's analysis version is this one, and otherwise
asks the version that made it (harness/audit/versions.py).
"""

from __future__ import annotations

ANALYSIS_VERSION = 2
PROVENANCE_KEY = "analysis_version"
