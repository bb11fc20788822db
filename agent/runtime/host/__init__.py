"""agent.runtime.host."""
