"""What a job is made of at run time: its context, outcomes, retry policy, payload encoding, events,
the group commit of step results, the stored error text, name validation and the retention job.

What it is not: where jobs are declared (``ujobs_bridge.job``) or run (``_internal.worker``).
"""
