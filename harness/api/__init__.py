"""The contract: what a backend and a launcher implement, and the one registry table."""
