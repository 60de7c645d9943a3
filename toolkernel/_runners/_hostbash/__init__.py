"""`%%bash` on the host: real bash, with `tools` on its PATH routed through the approval layer.

    _runner.py    HostBashRunner (a `_shell.ScriptRunner`): the bash process group, script
                  file, streaming, cancel, timeout, background
    _channel.py   the Unix socket the `tools` shim calls, one secret per run
    shim.py       the `tools` and `display` executables (standard library only)
    _cell.py      whose cell it is; an agent's cell as one `Bash` call, asked before it starts
"""
