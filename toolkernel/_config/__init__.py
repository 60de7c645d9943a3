"""The config: found and read (`_sources`), checked section by section into frozen dataclasses
(`_servers`, `_policy`, `_hooks`, `_tools`, `_tools_in_shell`, `_limits`), merged (`_merge`),
cached by fingerprint (`_cache`); workspace trust (`_trust`, `_untrusted`); the rule language (`_rules`)."""
