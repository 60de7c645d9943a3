"""Script runners: Bashkit on its own thread, host bash with a `tools` shim, the before-start check, output limits, what scripts may not write."""
