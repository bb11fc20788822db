"""agent.runtime.results."""
