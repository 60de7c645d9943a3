"""Fixture: toolkernel's own demo MCP server, as `python -m toolkernel.demo_server` runs it, through the
suite's fork server when there is one (see _zygote.py). The tests of the demo's own command line keep
`-m toolkernel.demo_server`."""

if __name__ == "__main__":
    import runpy
    import sys

    sys.path.insert(0, __file__.rpartition("/")[0])  # toolkernel sets PYTHONSAFEPATH
    import _zygote

    del sys.path[0]
    _zygote.hand_over()
    runpy.run_module("toolkernel.demo_server", run_name="__main__", alter_sys=True)
