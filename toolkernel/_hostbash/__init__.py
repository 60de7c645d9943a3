"""`%%bash` on the host: real bash, with `tools` on its PATH routed through the approval layer.

    _runner.py    the bash process group: script file, streaming, interrupt, timeout, background
    _channel.py   the Unix socket the `tools` shim calls, one secret per run
    shim.py       the `tools` and `display` executables (standard library only)
    _cell.py      one cell: prepare the run, check an agent's cell against Bash(...) rules, run
    _magic.py     the `%%bash` magic (thin)
"""
