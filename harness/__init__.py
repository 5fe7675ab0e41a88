"""epcap: a benchmarking harness for MoE expert-parallel dispatch capacity."""

__version__ = "0.1.0"
