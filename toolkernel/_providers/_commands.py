"""Command tools: a local program, defined in the config, called like any other tool.

A `[tools.NAME]` table with a `command` key (seed 003) becomes the tool `tools NAME`,
qualified `tool__NAME` in policy rules, hooks and reports:

    [tools.ripgrep]
    description = "search the repository"
    command = ["rg", "--json", "{{ input.pattern }}"]
    parameters = { type = "object", properties = { pattern = { type = "string" } }, required = ["pattern"] }
    timeout = 10            # seconds, default 30
    env = { PATH = "${PATH}" }   # an allow-list; absent = the kernel's environment
    cwd = "src"             # relative to the working directory
    read_only = true        # the person's word that it changes nothing
    input_options = false   # true: a value may begin an argument with `-` (an option)

Each argv element is a Handlebars template filled from `{"input": <the call's input>}`
on its own, and the argv is exec'd without a shell: a value can never add, split or
join argv elements, and `;`, `|` or `$()` in a value are plain characters. Values are
inserted as they are: `{{ }}` does not HTML-escape here (the seed passes values
unchanged; HTML escaping would corrupt `&` and `<` in a search pattern). Missing
values render as the empty string, lists as `a,b` and objects as `[object Object]`,
as Handlebars.js does.

The library is `dotpromptz-handlebars`: pure Python, maintained (Google's Dotprompt),
and checked against Handlebars.js 4.7.9 itself. `pybars3`/`pybars4` last released in
2019/2021; `chevron` and `pystache` are Mustache, which lacks Handlebars' paths
(`../x`, `items.[0]`), `each`/`with` blocks and `@index` data.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import functools
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from dotpromptz_handlebars import Text

from .._config._commands import CommandToolConfig, _compiled, _RENDER
from .._errors import ConfigError, InvalidInput
from .._process import ProcessResult, run_capped
from .._sandbox import Plan, wrap
from .._tool import Tool, ToolContext, ToolResult

OUTPUT_CAP = 16 * 1024 * 1024
MAX_PARALLEL = 8
STDERR_SHOWN = 2000


# -- checks the config reader and `lint` share ----------------------------------------

def undeclared_references(config: CommandToolConfig) -> list[tuple[str, str]]:
    """(key, path) for each template path that no declared parameter can fill,
    block conditions (`{{#if input.x}}`, `{{#each}}`, `{{#with}}`) included.

    Every template is rendered against an input that holds each declared property
    and notes each path looked up that it does not hold; twice, once with every
    value set and once with every value empty, so that both the `{{#if}}` and the
    `{{else}}` side of a block are visited.
    """
    found = []
    for index, template in enumerate(config.command):
        misses: list[str] = []
        for filled in (True, False):
            root = _Probe("", {"input": _probe(config.parameters, "input", filled, misses)}, misses)
            try:
                _RENDER.compile(template)(root)
            except ValueError:
                break  # a broken template is the config reader's finding
        found += [(f"{config.key}.command[{index}]", path) for path in dict.fromkeys(misses)]
    return found


class _Probe(Mapping[str, Any]):
    """An object of the probe input: it has the declared properties and notes each other name asked for."""

    def __init__(self, path: str, properties: dict[str, Any], misses: list[str]) -> None:
        self.path, self.properties, self.misses = path, properties, misses

    def __contains__(self, name: object) -> bool:
        if name not in self.properties:
            self.misses.append(f"{self.path}.{name}" if self.path else str(name))
            return False
        return True

    def __getitem__(self, name: str) -> Any:
        return self.properties[name]

    def __iter__(self):
        return iter(self.properties)

    def __len__(self) -> int:
        return len(self.properties)


def _probe(schema: Any, path: str, filled: bool, misses: list[str]) -> Any:
    if not isinstance(schema, Mapping):
        return "x" if filled else ""
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        return _Probe(path, {name: _probe(sub, f"{path}.{name}", filled, misses)
                             for name, sub in properties.items()}, misses)
    if schema.get("type") == "array":
        return [_probe(schema.get("items"), f"{path}[]", filled, misses)] if filled else []
    return "x" if filled else ""


def check_names(commands: Iterable[CommandToolConfig], own_tools: Iterable[str],
                servers: Mapping[str, str]) -> list[ConfigError]:
    """A command tool is `tools NAME`: it may not take a word an own tool or a server has.

    `servers` maps each MCP server's name to the file defining it. Names compare
    as everywhere in `tools`: case, hyphens and underscores do not matter.
    """
    own = {_fold(name): name for name in own_tools}
    by_server = {_fold(name): (name, source) for name, source in servers.items()}
    problems = []
    for config in commands:
        word = _fold(config.name)
        if word in own:
            problems.append(ConfigError(config.source, config.key, f"the command tool "
                            f"{config.name!r} has the name of toolkernel's own tool {own[word]!r}"))
        elif word in by_server:
            server, source = by_server[word]
            problems.append(ConfigError(config.source, config.key, f"the command tool "
                            f"{config.name!r} has the name of the MCP server {server!r} ({source});"
                            f" `tools {config.name}` could mean either"))
    return problems


def _fold(name: str) -> str:
    return name.replace("-", "_").lower()


# -- the tool ---------------------------------------------------------------------------

def fill(config: CommandToolConfig, arguments: Mapping[str, Any]) -> list[str]:
    """The argv for one call: each element rendered on its own, never split or joined."""
    context = {"input": dict(arguments)}
    # Most elements are literal words: they skip the renderer (about 0.1 ms each).
    return [_compiled(template)(context) if "{{" in template else template
            for template in config.command]


def option_problem(config: CommandToolConfig, arguments: Mapping[str, Any], argv: list[str]) -> str | None:
    """Why `argv` may not run: an argument that the input begins with `-`, before any `--` of
    the command, where the program reads it as an option and not as data (`rg` runs the
    program `--pre=CMD` names for each file it searches; `git` runs `--upload-pack=CMD`).

    Judged on each argument as composed from all its templates: `{{input.a}}{{input.b}}` with
    a = "-" and b = "-output=F" is `--output=F`, though neither value is that option. A value
    goes in as one argument whatever it holds, so no shell can be injected; an option can.
    An argument that is `-` alone (standard input) or one number value (`-5`) is data, and one
    whose first character is the template's own text (`--format={{input.f}}`) is the author's."""
    if config.input_options:
        return None
    for template, word in zip(config.command[1:], argv[1:]):
        if template == "--":
            return None
        if "{{" in template and word.startswith("-") and word != "-" and _input_leads(template, arguments, word):
            if word in _numbers(arguments):
                continue
            return (f"the argument {word!r} begins with `-` from the input, so it would reach "
                    f"`{os.path.basename(argv[0])}` as an option, not as data; nothing ran (the command of "
                    f"[tools.{config.name}] has no \"--\" before it; where options are meant to come from "
                    "the input, its table says input_options = true)")
    return None


# Around each piece of a template's own text when an argument is rendered again to see who
# wrote its first character; no argument holds a NUL (`_refuse_unrunnable` checks first).
_OWN_TEXT, _END_TEXT = "\0(", "\0)"


def _input_leads(template: str, arguments: Mapping[str, Any], word: str) -> bool:
    """Whether the first character of `word` (`template` filled from `arguments`) came from the
    input: a value, a key (`{{@key}}`), a list's comma, anything but the template's own text.
    The template's text pieces are marked and it is rendered again; should that not give
    `word` back, the input is taken to lead (failing closed)."""
    try:
        marked = _RENDER._render_program(_own_text_marked(template), {"input": dict(arguments)}, None, data=None)
    except Exception:  # rendered once already; a second failure is not a reason to run
        return True
    if marked.replace(_OWN_TEXT, "").replace(_END_TEXT, "") != word:
        return True
    return not marked.startswith(_OWN_TEXT)  # a marker before the first character opens own text


@functools.lru_cache(maxsize=256)
def _own_text_marked(template: str) -> list[Any]:
    # The library's parse tree (its node types are public; the parse and render functions are
    # not, hence the private names): each `Text` node is the template's own, copied as it is.
    from dotpromptz_handlebars._render import compile_template

    return _marked(compile_template(template, max_depth=_RENDER.max_depth))


def _marked(nodes: list[Any]) -> list[Any]:
    out = []
    for node in nodes:
        if isinstance(node, Text):
            node = Text(_OWN_TEXT + node.value + _END_TEXT) if node.value else node
        else:
            node = copy.copy(node)
            for name in ("body", "inverse"):
                if isinstance(getattr(node, name, None), list):
                    setattr(node, name, _marked(getattr(node, name)))
        out.append(node)
    return out


def _numbers(arguments: Mapping[str, Any]) -> set[str]:
    """How each number value of the input reads in an argument (`-5`, `-1.5`)."""
    stack, found = [arguments], set()
    while stack:
        item = stack.pop()
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            found.add(_compiled("{{n}}")({"n": item}))
        elif isinstance(item, Mapping):
            stack += item.values()
        elif isinstance(item, (list, tuple)):
            stack += item
    return found


def _refuse_unrunnable(config: CommandToolConfig, arguments: Mapping[str, Any], argv: list[str]) -> None:
    """An argv the program must not get: a value as an option (`option_problem`), or one holding
    a NUL, which no argument can carry (the system call refuses the whole argv)."""
    if any("\0" in word for word in argv):  # (half a surrogate pair never gets past the dispatcher)
        raise InvalidInput(f"tool__{config.name}: an input value holds a NUL character (\\u0000), which no"
                           " program argument can carry; nothing ran")
    if problem := option_problem(config, arguments, argv):
        raise InvalidInput(f"tool__{config.name}: {problem}")


class ProcessSlots:
    """At most `MAX_PARALLEL` command-tool processes per kernel; the rest wait their turn.

    A command tool runs on the loop of the thread that calls it (a script's own, the
    direct calls' worker's), which spares a hand-off to the private loop per call; so
    the count is shared by threads: a freed slot goes to the first waiter, on that
    waiter's loop. (An asyncio.Semaphore belongs to one loop and is not thread-safe.)
    """

    def __init__(self, limit: int = MAX_PARALLEL) -> None:
        self._lock = threading.Lock()
        self._free = limit
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    async def take(self) -> None:
        """Wait for a free slot; `give_back` it when the process has ended."""
        with self._lock:
            if self._free:
                self._free -= 1
                return
            turn = asyncio.get_running_loop().create_future()
            self._waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            with self._lock:
                handed_over = turn not in self._waiting
                if not handed_over:
                    self._waiting.remove(turn)
            if handed_over:  # the slot came as the wait was cancelled: it goes on
                self.give_back()
            raise

    def give_back(self) -> None:
        with self._lock:
            while self._waiting:
                turn = self._waiting.popleft()
                try:
                    turn.get_loop().call_soon_threadsafe(_your_turn, turn)
                    return
                except RuntimeError:  # its loop was closed: the waiter is gone
                    continue
            self._free += 1


def _your_turn(turn: asyncio.Future[None]) -> None:
    if not turn.done():  # a cancelled waiter passes the slot on itself
        turn.set_result(None)


@dataclass(frozen=True)
class CommandTool(Tool):
    config: CommandToolConfig | None = None

    def describe_call(self, arguments: Mapping[str, Any], ctx: ToolContext | None = None) -> dict[str, Any]:
        # The person approves what runs, and the template may wrap the input in more.
        return {"argv": fill(self.config, arguments)}


def command_tool(config: CommandToolConfig, slots: ProcessSlots) -> CommandTool:
    async def call(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await run_command(config, arguments, ctx.workdir, slots, sandbox=ctx.sandbox)

    def precheck(arguments: Mapping[str, Any], ctx: ToolContext) -> None:
        # Before a person is asked: the argv shown would not run whatever the answer.
        _refuse_unrunnable(config, arguments, fill(config, arguments))

    return CommandTool(
        name=config.name,
        description=config.description or f"runs `{config.command[0]}` (a command tool)",
        input_schema=config.parameters,
        call=call,
        precheck=precheck,
        kind="read" if config.read_only else "execute",
        config=config,
    )


async def run_command(config: CommandToolConfig, arguments: Mapping[str, Any], workdir: Path,
                      slots: ProcessSlots, *, sandbox: Plan | None = None) -> ToolResult:
    """Run the filled argv (inside `sandbox` when an agent's run calls it); a failure of the
    program is an error result, not an exception."""
    if config.missing_vars:
        return ToolResult.error(f"tool__{config.name}: not run, the environment variable(s) "
                                f"{', '.join(config.missing_vars)} named in env/cwd are not set")
    argv = fill(config, arguments)
    _refuse_unrunnable(config, arguments, argv)  # checked where it runs, whatever came before
    cwd = workdir / Path(config.cwd).expanduser() if config.cwd else workdir
    if not _findable(config, argv[0]):
        return ToolResult.error(f"tool__{config.name}: could not start {argv[0]!r}: not found on "
                                "the PATH of its env allow-list (add PATH = \"${PATH}\" to env)")
    await slots.take()
    try:
        env = config.env
        if sandbox is not None:
            sandbox = sandbox.with_network(sandbox.network or config.network)
            # An `env` list is the person's own allow-list; without one, the sandbox's.
            env = sandbox.environment(os.environ) if env is None else sandbox.environment({}, env)
        run = argv if sandbox is None else wrap(argv, sandbox)
        done = await run_capped(run, env=env, cwd=cwd, timeout=config.timeout,
                                stdout_cap=OUTPUT_CAP, stderr_cap=OUTPUT_CAP)
    except OSError as exc:
        return ToolResult.error(f"tool__{config.name}: could not start {argv[0]!r}: "
                                f"{exc.strerror or exc}")
    finally:
        slots.give_back()
    return _result(config, done)


def _findable(config: CommandToolConfig, program: str) -> bool:
    """With an env allow-list, a bare program is looked up on that PATH only (seed 003).
    Popen searches the list's PATH itself; without one (or with an empty one, which means
    the working directory) Python would fall back to /bin:/usr/bin, a PATH the person never
    allowed, so the call is refused."""
    return config.env is None or "/" in program or bool(config.env.get("PATH"))


def _result(config: CommandToolConfig, done: ProcessResult) -> ToolResult:
    result = _outcome(config, done)
    if result.is_error:  # the program's stderr may echo what it was handed (a token it rejected)
        result.texts = [_masked(text, config.secrets) for text in result.texts]
    return result


def _masked(text: str, secrets: tuple[str, ...]) -> str:
    for value in sorted(set(secrets), key=len, reverse=True):  # a secret holding another: whole
        if len(value) >= 4:
            text = text.replace(value, "***")
    return text


def _outcome(config: CommandToolConfig, done: ProcessResult) -> ToolResult:
    name = f"tool__{config.name}"
    if done.over_cap:
        return ToolResult.error(f"{name}: {done.over_cap} passed the {OUTPUT_CAP // 2**20} MiB "
                                "limit; the process tree was killed")
    if done.timed_out:
        return ToolResult.error(f"{name}: timed out after {config.timeout:g} s; the process tree"
                                f" was killed{_stderr(done)}")
    if done.returncode != 0:
        how = (f"was killed by signal {-done.returncode}" if done.returncode < 0
               else f"exited with code {done.returncode}")
        return ToolResult.error(f"{name}: {how}{_stderr(done)}")
    return ToolResult.text(done.stdout_text)


def _stderr(done: ProcessResult) -> str:
    tail = done.stderr_tail(STDERR_SHOWN)
    return f"; stderr: {tail}" if tail else ""


