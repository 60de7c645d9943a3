"""The approval layer: the dispatcher every call passes, policy, hooks, approvals and the approver,
the run's record, what no call may write."""
