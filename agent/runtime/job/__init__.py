"""agent.runtime.job."""
