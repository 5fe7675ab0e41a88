"""Safe input and output: bounded readers, the one YAML reader, atomic writes, lock, redaction."""
