"""agent.runtime.ops."""
