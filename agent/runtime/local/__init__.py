"""agent.runtime.local."""
