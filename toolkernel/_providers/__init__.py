"""Where tools come from: one door (ToolProvider) for own, notebook, MCP and command tools."""
