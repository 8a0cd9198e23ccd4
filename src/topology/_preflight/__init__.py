"""The pre-launch check: cluster, placement, communicators, rules, report."""
