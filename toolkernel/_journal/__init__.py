"""The journal of changes (issue 38, 44): what each run changed in the workspace, and the way back.

    _store.py     the journal of one workspace: runs, stored contents, the day's limit, keeping
    _record.py    what one run records (`RunJournal`), and a run read back (`RunRecord`)
    _scan.py      a shell run's own changes: the workspace compared before and after it
    _parts.py     a large file's prior content copied by the kernel, hashed on a thread
    _restore.py   rewinding a run, every write from a workspace folder's descriptor
    _describe.py  the runs, a file's diff, a rewind's outcome, as a person reads them

The layers above reach it through these names; a tool reaches a run's journal only through
`_tool.Recorder`.
"""

from .._errors import RewindError
from ._describe import describe_about, describe_rewind, describe_runs, diff_of, iter_changes, rewound_by
from ._record import CellEntry, Entry, RunJournal, RunRecord, source_hash
from ._restore import Rewound, chosen_cells, chosen_files, rewind
from ._store import Journal, journal_root
from ._watch import doctor_line

__all__ = ["CellEntry", "Entry", "Journal", "RewindError", "Rewound", "RunJournal", "RunRecord", "chosen_cells",
           "chosen_files", "describe_about", "describe_rewind", "describe_runs", "diff_of", "doctor_line", "iter_changes", "journal_root", "rewind", "rewound_by",
           "source_hash"]
