"""A host `%%bash` cell run in a session, for the journal's tests."""

from __future__ import annotations

from kernel_helpers import RecordingSink


def host_cell(session, script: str, *, ok: bool = True):
    """A host `%%bash` cell run in `session`: its result and what it printed."""
    from toolkernel._runners._hostbash._channel import Channel
    from toolkernel._runners._hostbash._runner import HostBashRunner

    channel = Channel()
    try:
        sink = RecordingSink()
        result = session.run_script(script, sink, runner=HostBashRunner(channel))
    finally:
        channel.close()
    if ok:
        assert result.exit_code == 0, sink.stderr_text
    return result, sink
