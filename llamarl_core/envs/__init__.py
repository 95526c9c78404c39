"""Multi-turn episodes: environments and tools as a user writes them (docs/ENVIRONMENTS.md)."""
