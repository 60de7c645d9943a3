"""`[sandbox]`: what an agent's host processes see beyond the OS sandbox's own allow-lists.

    env = ["HF_HOME", "CONDA_*"]           environment variables passed in, beside PATH, HOME,
                                           LANG, LC_*, TERM, USER and TZ (`NAME_*` a prefix)
    home = [".config/ruff"]                under the home folder, bound back read-only, beside
                                           the default (`_runners/_sandbox_plan.HOME_SHOWN`)
    home_writable = [".cache/huggingface"] bound back writable
    domains = ["github.com", "*.example.org:8443"]
                                           where a network grant reaches through the proxy
                                           (default: the package indexes pip, uv and npm use)

Every key shows the sandbox more, so only a trusted file's `[sandbox]` counts (an untrusted
one is checked all the same, then dropped). Lists join across files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ._check import known_keys, string_list, table
from ._sources import Source

SANDBOX_KEYS = ("env", "home", "home_writable", "domains")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")
_DOMAIN = re.compile(r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$")


@dataclass(frozen=True)
class SandboxSettings:
    env: tuple[str, ...] = ()
    home: tuple[str, ...] = ()
    home_writable: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()

    def then(self, nearer: "SandboxSettings") -> "SandboxSettings":
        return SandboxSettings(*(tuple(dict.fromkeys(getattr(self, key) + getattr(nearer, key)))
                                 for key in SANDBOX_KEYS))


def sandbox_section(source: Source, raw: Any) -> SandboxSettings:
    checked = table(source, "sandbox", raw)
    source.attempt(known_keys, source, "sandbox", checked, SANDBOX_KEYS)
    values = {key: source.attempt(string_list, source, f"sandbox.{key}", checked.get(key, []), default=())
              for key in SANDBOX_KEYS}
    for index, name in enumerate(values["env"]):
        if not _NAME.match(name):
            source.problems.append(source.error(f"sandbox.env[{index}]", "expected a variable name, or a"
                                                " prefix ending in `*` (`CONDA_*`)"))
    for key in ("home", "home_writable"):
        for index, path in enumerate(values[key]):
            if path.startswith(("/", "~")) or ".." in path.split("/"):
                source.problems.append(source.error(f"sandbox.{key}[{index}]", "expected a path under the home"
                                                    " folder, relative to it (`.cache/pip`)"))
    for index, domain in enumerate(values["domains"]):
        if not _DOMAIN.match(domain) or (":" in domain and not 0 < int(domain.rpartition(":")[2]) < 65536):
            source.problems.append(source.error(f"sandbox.domains[{index}]", "expected a host name, `*.` before"
                                                " it for its subdomains, `:PORT` after it for another port"
                                                " than 443 and 80"))
    return SandboxSettings(**{key: tuple(value or ()) for key, value in values.items()})
