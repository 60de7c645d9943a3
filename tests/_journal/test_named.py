"""What a script names as it writes (`_journal/_named.py`, issue 44 item 2)."""

from __future__ import annotations

import pytest

from toolkernel._journal._named import named
from toolkernel._journal._scan import _expanded


@pytest.mark.parametrize("script, paths, complete", [
    ("rm -rf data/d1", {"data/d1"}, True),
    ("sed -i 's/a/b/' data/d2/f.csv", {"data/d2/f.csv"}, True),
    ("sed 's/a/b/' data/d2/f.csv > out.csv", {"out.csv"}, True),
    ("mv data/d4 data/d4moved", {"data/d4", "data/d4moved"}, True),
    ("echo hi", set(), True),
    ("cat a | tee b >> c", {"b", "c"}, True),
    ("cp -r src dst", {"dst"}, True),
    ("sort -o sorted.txt in.txt", {"sorted.txt"}, True),
    ("for f in *.csv; do cat $f > $f.bak; done", set(), False),
    ("f=a.txt; rm $f", set(), False),
    ("python3 train.py", set(), False),
    ("find . -name '*.tmp' -delete", set(), False),
    ("eval 'rm x'", set(), False),
])
def test_the_paths_a_script_writes_and_whether_that_is_all(script, paths, complete):
    said = named(script)
    assert set(said.paths) == paths and said.complete is complete


def test_named_paths_cover_folders_globs_and_cd_targets():
    files = {"data/d1/a.csv": 0, "data/d1/sub/b.csv": 0, "data/d10/c.csv": 0, "x.csv": 0, "sub/z": 0, "y.txt": 0}
    assert _expanded(named("rm -rf data/d1"), files) == {"data/d1/a.csv", "data/d1/sub/b.csv"}
    assert _expanded(named("rm *.csv"), files) == {"x.csv"}
    assert _expanded(named("cd sub && rm z"), files) == {"sub/z"}
    assert _expanded(named("rm ../outside /etc/passwd"), files) == set()
