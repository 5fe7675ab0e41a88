"""The sections of report.md, one module each: `render(ctx: Context) -> list[str]`.

Their order in report.md is `harness.report.build.SECTIONS`; how to add one:
harness/report/README.md.
"""
