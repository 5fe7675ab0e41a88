"""`epcap forecast`: capacity at other EP sizes and micro-batches from recorded routing."""
