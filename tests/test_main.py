"""`toolkernel` on the command line (`toolkernel/__main__.py`): what `toolkernel demo` prints, and usage errors."""

import nbformat
import pytest

from toolkernel.__main__ import main, print_outputs


def test_the_demo_printout_has_a_heading_the_markdown_and_code_cells_numbered_as_lab_numbers_them(capsys):
    # It printed "── cell 2 ──", then 4, 5, 7: the notebook's indexes, with every markdown cell dropped.
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Quickstart\nWhat this shows."),
        nbformat.v4.new_code_cell("%load_ext toolkernel"),
        nbformat.v4.new_markdown_cell("Now a call:"),
        nbformat.v4.new_code_cell("%%tools\necho hi", outputs=[nbformat.v4.new_output("stream", text="hi\n")]),
    ])
    print_outputs(nb, "quickstart.ipynb")
    out = capsys.readouterr().out
    assert out.startswith("═══ quickstart.ipynb ═══\n")
    assert "# Quickstart\nWhat this shows.\n" in out and "Now a call:\n" in out
    assert "── [1] " in out and "── [2] " in out and "cell 2" not in out and "[3]" not in out
    # In the notebook's order, and a cell that printed nothing shows no empty "output:" line.
    assert out.index("Now a call:") < out.index("── [2]") < out.index("hi\n")
    assert out.count("── output:") == 1


def test_an_unknown_option_of_a_command_shows_that_commands_usage(capsys):
    # It showed the list of every command ("usage: toolkernel [-h] {demo,trust,...}"), not the options
    # of the command that was mistyped.
    with pytest.raises(SystemExit) as exited:
        main(["changes", "--bogus"])
    said = capsys.readouterr().err
    assert exited.value.code == 2
    assert said.startswith("usage: toolkernel changes [-h]") and "--run ID" in said, said
    assert said.rstrip().endswith("toolkernel changes: error: unrecognized arguments: --bogus"), said
