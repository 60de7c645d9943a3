"""Configuration: which MCP servers exist, the policy, the hooks, tool settings.

Read at the start of a run (re-read only when a fingerprint moves, `_cache`): the
files are found and read by `_sources`, each section is checked and turned into frozen
dataclasses by its own module (`_servers`, `_policy`, `_hooks`, `_tools`,
`_tools_in_shell`, `_limits`), and `_merge` folds the files into one `Config`.
Every problem in every file is collected, and one `ConfigError` reports them all.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from .._errors import ConfigError, ConfigErrors
from ._merge import Builder, Config
from ._sources import Doubts, home, sources
from ._trust import TrustStore

__all__ = ["Config", "load_config", "read_config"]


def load_config(workdir: Path, *, user_config_dir: Path | None = None,
                admin_path: Path | None = None,
                environ: Mapping[str, str] | None = None) -> Config:
    """Read every config file that applies to `workdir`; `ConfigError` naming every
    problem (file and key) if any is wrong.

    `user_config_dir` is the folder holding the user's `toolkernel.toml` (default
    `$XDG_CONFIG_HOME/toolkernel`); `environ` is where `${VAR}`, `HOME` and the config
    locations are looked up (default `os.environ`).
    """
    config, problems = read_config(workdir, user_config_dir=user_config_dir, admin_path=admin_path,
                                   environ=environ)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ConfigErrors(list(problems))
    return config


def read_config(workdir: Path, *, user_config_dir: Path | None = None, admin_path: Path | None = None,
                environ: Mapping[str, str] | None = None,
                as_trusted: bool = False) -> tuple[Config, tuple[ConfigError, ...]]:
    """The config without its wrong entries, and every problem found (for `toolkernel lint`;
    a run uses `load_config`, which refuses a config with any problem). `as_trusted`: every
    file is taken whole, as a person who trusted it would use it (lint: nothing here starts
    anything, and its findings must not depend on trust); the doubts are still noted."""
    environ = os.environ if environ is None else environ
    builder = Builder(environ, home(environ))
    doubts = Doubts(TrustStore(environ=environ), as_trusted=as_trusted)
    found = sources(Path(workdir), environ, user_dir=user_config_dir, admin=admin_path)
    read = [(source, source.attempt(source.read)) for source in found]
    for source, data in read:
        doubts.saw(source, data)
    for source, data in read:
        if data is not None:
            builder.add(source, data, doubts.about(source))
    config = builder.build(doubts.notes(), doubts.to_trust(),
                           approvals_trusted=not doubts.of(Path(workdir).resolve()),
                           code_paths=tuple(dict.fromkeys(doubts.code_paths)))
    return config, tuple(problem for source in found for problem in source.problems)
