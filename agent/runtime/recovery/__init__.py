"""agent.runtime.recovery."""
