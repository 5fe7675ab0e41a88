"""The numpy model of EP load: workloads, traces, planners, load simulation; and memory.py,
the per-rank device-memory model (the reference backend's OOM, the dry run's warnings)."""
