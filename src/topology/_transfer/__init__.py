"""Weight transfer between two layouts: where each parameter's slices live, and who sends what."""
