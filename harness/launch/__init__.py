"""Launchers run one cell's processes: `local` (subprocesses) or `slurm` (sbatch/srun)."""
