"""Reading toolkernel.toml, .mcp.json and the admin file (cached by fingerprint); the [shell] limits; workspace trust; lint."""
