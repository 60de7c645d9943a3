"""A command tool's `[tools.NAME]` table as the config reader checks it (seed 003): its frozen
`CommandToolConfig`, its defaults, and the checks the reader and `lint` share (schema,
templates). Running one is `_providers/_commands.py`'s, which tells the syntax."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from dotpromptz_handlebars import Handlebars

QUALIFIED_PREFIX = "tool__"
DEFAULT_TIMEOUT = 30.0
# Seed 003: no `parameters` is a tool that takes no arguments.
NO_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}}

_RENDER = Handlebars(escape_html=False)


@dataclass(frozen=True)
class CommandToolConfig:
    """One `[tools.NAME]` table with a `command`, `${VAR}`s already expanded."""

    name: str
    command: tuple[str, ...]
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: dict(NO_PARAMETERS))
    timeout: float = DEFAULT_TIMEOUT
    env: Mapping[str, str] | None = None  # None: the kernel's environment is inherited
    cwd: str | None = None
    read_only: bool = False
    # The person's word that options may come from the input (else a value that would reach
    # the program as an option, before any `--` of the command, is refused: `option_problem`).
    input_options: bool = False
    # The person's word that the program needs the network when an agent's run calls it inside
    # the OS sandbox (which has none otherwise; a person's own calls are not sandboxed).
    network: bool = False
    missing_vars: tuple[str, ...] = ()  # ${VAR}s of env/cwd that were unset
    source: str = field(default="", compare=False)
    # What env/cwd `${VAR}`s expanded to: masked in the errors a script reads, as for servers.
    secrets: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"tools.{self.name}"

    @property
    def qualified_name(self) -> str:
        return QUALIFIED_PREFIX + self.name


def schema_problem(parameters: Any) -> str | None:
    """Why `parameters` cannot be a command tool's input schema, or None."""
    if not isinstance(parameters, Mapping):
        return "must be a JSON Schema object (a table)"
    if parameters.get("type", "object") != "object":
        return 'the input is always a JSON object, so "type" must be "object" when given'
    import jsonschema  # on first use: see _dispatch.validate
    validator = jsonschema.validators.validator_for(parameters, default=jsonschema.Draft202012Validator)
    try:
        validator.check_schema(parameters)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the schema"
        return f"not a valid JSON Schema ({where}: {exc.message})"
    return None


def template_problem(template: str) -> str | None:
    """Why an argv element is not a Handlebars template, or None."""
    try:
        _compiled(template)
    except ValueError as exc:
        return f"not a valid Handlebars template: {exc}"
    return None


@functools.lru_cache(maxsize=1024)
def _compiled(template: str):
    return _RENDER.compile(template)


def plain_json(value: Any) -> Any:
    """TOML tables as plain JSON data (the schema goes to jsonschema and to help)."""
    return json.loads(json.dumps(value, default=str))
