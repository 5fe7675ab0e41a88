"""The failure taxonomy: upstream signatures as data and the judge of a run."""
