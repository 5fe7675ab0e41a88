"""The results directory: the only room that knows file names and formats."""
