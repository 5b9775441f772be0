"""Launch a trainer for a resolved spec (local process or Ray job) and record it as a run directory."""
