"""The numpy model of EP load: workloads, traces, planners, load simulation."""
