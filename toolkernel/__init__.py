"""toolkernel: Tools in Shell for Jupyter."""
