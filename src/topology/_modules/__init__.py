"""Multi-module layouts: named modules on their own rank spans, their schedule, bridges."""
