"""Pure capacity math: the executable grid, selection, drop risk."""
