"""agent.runtime.epochs."""
