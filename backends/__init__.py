"""Backends: one module per dispatch library plus the torch.distributed `reference` emulation.

Each module imports the contract from harness.api.backend and exposes
`make_backend(config) -> Backend` and `OPTIONS` (its runbook options dataclass); the harness
finds it by name through harness.api.registry. How to add one: backends/README.md.
"""
