"""Build hook for the optional compiled scanner (everything else lives in pyproject.toml).

`harness.telemetry._scan` speeds up `epcap parse`; `optional=True` lets the install go on without it
where no C compiler exists, and harness/telemetry/summary.py then keeps its pure-Python path.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("harness.telemetry._scan", ["harness/telemetry/_scan.c"], optional=True)])
