"""Shell completion for bash, zsh and fish: the `devctl completion` command, the scripts it prints and
installs, what devctl answers on a TAB press, and the value completers the options declare
(`typer.Option(..., autocompletion=completion.directions)`).

A TAB press runs `devctl` with `_DEVCTL_COMPLETE=<shell>` and `_DEVCTL_COMPLETE_LINE` (the command line
up to the cursor; bash adds `_DEVCTL_COMPLETE_WORDBREAKS`, where readline cuts the word it replaces).
devctl builds only the command already typed (never jax), finds what the cursor is on with click's public
objects (a group's commands, a command's params, `Parameter.shell_complete`), and prints one candidate a
line: `kind<TAB>value<TAB>help` (bash: no help). The kind tells the script what to do with it:

- plain: a word, then a space; partial: a word that goes on (`cuda:`), no space after it;
- file, dir: the shell completes a file or directory name itself, with its own quoting and `~`.

The protocol is devctl's own, not typer's `--install-completion` (which edits ~/.bashrc, and whose scripts
cannot tell a file name from a value). `python -m devctl.cli.generated --update` writes the scripts from
SCRIPTS here into the package (devctl/completions/, shipped in the wheel) and the repository's
completions/; `devctl completion SHELL` prints the package's copy, and `--install` writes it where the shell
looks for a user's completions, never through a symbolic link and never into a startup file.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any, Callable, Iterable

import typer

COMPLETE_VAR = "_DEVCTL_COMPLETE"
LINE_VAR = "_DEVCTL_COMPLETE_LINE"
BREAKS_VAR = "_DEVCTL_COMPLETE_WORDBREAKS"
SHELLS = ("bash", "zsh", "fish")
# Each shell's script, by the name its shell looks it up by (zsh autoloads `_devctl` from $fpath).
FILES = {"bash": "devctl.bash", "zsh": "_devctl", "fish": "devctl.fish"}
# The scripts as the package ships them (package data, written by devctl.cli.generated).
PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "completions")

# ---- value completers: given to typer.Option(autocompletion=...), called with the value typed so far ------
# Typer keeps those that start with what was typed; they import nothing heavy (no jax: a TAB press is a
# fresh process, and devices are not counted to complete `--device`).

Completer = Callable[[str], list]


class _FileName(str):
    """The value as typed, handed back marked (typer passes a str through): the shell completes a name of
    this `kind` itself."""

    kind = "file"


class _DirectoryName(_FileName):
    kind = "dir"


def files(incomplete: str) -> list[str]:
    """A file name (--baseline, --config, --junit-xml): the shell's own file completion."""
    return [_FileName(incomplete)]


def directories(incomplete: str) -> list[str]:
    """A directory name (--host-root): the shell's own directory completion."""
    return [_DirectoryName(incomplete)]


def names(values: Callable[[], Iterable[str | tuple[str, str]]], *, comma_list: bool = True) -> Completer:
    """One of `values()` (a name, or a (name, help) pair); with `comma_list`, the entry after the last comma
    of a comma-separated list (`--only versions,pl` -> `versions,plugins`), leaving out the names already there."""

    def complete(incomplete: str) -> list:
        head, _, tail = incomplete.rpartition(",") if comma_list else ("", "", incomplete)
        typed = {n.strip().lower() for n in head.split(",")} if head else set()
        out: list = []
        for value in values():
            name, help_ = value if isinstance(value, tuple) else (value, "")
            if name.startswith(tail.lower()) and name not in typed:
                word = f"{head},{name}" if head else name
                out.append((word, help_) if help_ else word)
        return out

    return complete


def _directions() -> list[tuple[str, str]]:
    from devctl.model import bench_transfer as m

    said = {"h2d": "host to device", "d2h": "device to host", "d2d": "device to another device", "d2d-self": "within one device"}
    return [(d, said.get(d, "")) for d in m.DIRECTIONS] + [("all", "every direction")]


def _variants() -> list[tuple[str, str]]:
    from devctl.model import bench_transfer as m

    out = [("main", "each direction's plain call"), ("all", "every variant")]
    return out + [(v, ", ".join(d for d in m.DIRECTIONS if v in m.VARIANTS[d])) for v in m.ALL_VARIANTS]


def _check_names() -> tuple[str, ...]:
    from devctl.model.check import CHECK_NAMES

    return CHECK_NAMES


def _platforms() -> list[str]:
    from devctl.cli.options import known_platforms

    return known_platforms()


def _publishing_pids() -> list[str]:
    """The pids of the jobs publishing snapshots where `devctl memstats` reads them: the names of their
    `<pid>.json` files, nothing opened (a TAB press stays fast; memstats itself judges each file)."""
    from devctl.discovery import publishers
    from devctl.safefs import private_directory_problem

    explicit = os.environ.get(publishers.ENV_DIR)
    found: set[int] = set()
    for directory in [os.path.abspath(explicit)] if explicit else publishers.candidate_directories():
        if private_directory_problem(directory):  # a link or another user's directory: not read by memstats either
            continue
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        # publishers._NAME is the snapshot file name memstats reads (`<pid>.json`): one pattern, not a copy.
        found.update(int(m.group(1)) for name in entries[: publishers.MAX_FILES * 4] if (m := publishers._NAME.match(name)))
    return [str(pid) for pid in sorted(found)]


directions = names(_directions)
variants = names(_variants)
check_names = names(_check_names)
platforms = names(_platforms)
pids = names(_publishing_pids, comma_list=False)
shells = names(lambda: SHELLS, comma_list=False)

# Completers for options whose declaration names none yet (an option of a module other than this one):
# used when the option's own completion offers nothing.
_UNDECLARED: dict[str, Completer] = {"--pid": pids}


def devices(*, many: bool = True, physical_views: bool = False) -> Completer:
    """--device, --src, --dst: `all` (with `many`) and the platform prefixes (`cuda:`); ids are left to the
    user, since counting devices would start JAX on a TAB press."""

    def values() -> list[tuple[str, str]]:
        from devctl.model.devices import PHYSICAL_VIEWS

        out = [("all", "every device")] if many else []
        out += [(f"{p}:", f"{p}:ID, a {p} device by its JAX id") for p in _platforms()]
        return out + ([(f"{v}:", f"{v}:ID, a chip or GPU JAX does not use") for v in PHYSICAL_VIEWS] if physical_views else [])

    return names(values, comma_list=many)


def units(suffixes: Iterable[str], *, comma_list: bool = False) -> Completer:
    """A number typed so far, with each of its units (`40` -> 40GiB, 40GB, ...); nothing before a number."""
    suffixes = tuple(suffixes)

    def complete(incomplete: str) -> list[str]:
        head, _, tail = incomplete.rpartition(",") if comma_list else ("", "", incomplete)
        number = tail.rstrip("KMGTkmgtiBbs/%")
        if not number or not all(c.isdigit() or c == "." for c in number):
            return []
        return [f"{head},{number}{s}" if head else f"{number}{s}" for s in suffixes]

    return complete


sizes = units(("K", "M", "G"), comma_list=True)
memory_size = units(("GiB", "MiB", "TiB", "GB", "MB", "TB"))
rate = units(("GB/s", "Gbit/s", "MB/s", "GiB/s"))
percent = units(("%",))


# ---- answering a TAB press ---------------------------------------------------------------------------------


def respond(instruction: str) -> int:
    """Print the candidates for the line in the environment, in the format of `instruction`'s shell."""
    if instruction not in SHELLS:
        from devctl.cli.app import ERROR_PREFIX

        sys.stderr.write(
            f"{ERROR_PREFIX}unknown completion request {instruction[:40]!r}; the completion scripts of this devctl "
            "ask for bash, zsh or fish: install them again with `devctl completion SHELL --install` "
            "(devctl completion --help)\n"
        )
        return 2
    args, incomplete = split_line(os.environ.get(LINE_VAR, ""))
    try:
        items = candidates(args, incomplete)
    except Exception:
        if os.environ.get("DEVCTL_DEBUG") == "1":
            raise
        return 1  # a TAB press shows no traceback; the command itself will say what is wrong
    if instruction == "bash":
        cut = _readline_cut(incomplete, os.environ.get(BREAKS_VAR, ""))
        items = [(kind, value[len(cut) :] if value.startswith(cut) else value, help_) for kind, value, help_ in items]
        items = [item for item in items if item[1] or item[0] in ("file", "dir")]
    lines = [f"{kind}\t{_flat(value)}" + (f"\t{_flat(help_)}" if help_ and instruction != "bash" else "") for kind, value, help_ in items]
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


def split_line(line: str) -> tuple[list[str], str]:
    """The words after `devctl` that are complete, and the one being typed ('' after a space)."""
    import shlex

    lexer = shlex.shlex(line, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    words: list[str] = []
    try:
        words.extend(lexer)
    except ValueError:  # an open quote: the word typed so far, as the shell will read it once closed
        words.append(lexer.token)
    args = words[1:]
    if args and line[-1:] not in (" ", "\t", "\n"):
        return args[:-1], args[-1]
    return args, ""


Item = tuple[str, str, str]  # kind, value, help


def candidates(args: list[str], incomplete: str) -> list[Item]:
    """What may follow `devctl ARGS` where `incomplete` is typed: commands, options or an option's values."""
    import typer.main

    from devctl.cli.app import _commands_needed, app, register

    register(_commands_needed(args))
    command: Any = typer.main.get_command(app)
    ctx = _context(command, "devctl", None)
    given: set[str] = set()
    pending = None  # the option whose value is the next word
    positional = 0  # the command's arguments given (`devctl completion bash`)
    for word in args:
        if pending is not None:
            pending = None
        elif word.startswith("-") and word != "-":
            option, pending = _option_typed(command, ctx, word)
            given.update([option.name] if option is not None else [])
        elif _is_group(command):
            sub = command.get_command(ctx, word)
            if sub is None:
                return []
            command, ctx, given, positional = sub, _context(sub, word, ctx), set(), 0
        else:
            positional += 1
    if pending is not None:
        return _values(pending, ctx, incomplete)
    if incomplete.startswith("--") and "=" in incomplete:
        name, _, value = incomplete.partition("=")
        option = _option_named(command, ctx, name)
        return _values(option, ctx, value, f"{name}=") if option is not None and _takes_value(option) else []
    if incomplete.startswith("-"):
        return _options(command, ctx, incomplete, given)
    if _is_group(command):
        return [
            ("plain", name, sub.get_short_help_str())
            for name in command.list_commands(ctx)
            if name.startswith(incomplete) and (sub := command.get_command(ctx, name)) is not None and not sub.hidden
        ]
    arguments = [p for p in command.get_params(ctx) if p.param_type_name == "argument"]
    if positional < len(arguments):  # an argument still to give: its values (`devctl completion <TAB>`)
        return _values(arguments[positional], ctx, incomplete)
    # the rest of the command is options: offer those on an empty word
    return _options(command, ctx, incomplete, given) if not incomplete else []


def _context(command: Any, name: str, parent: Any) -> Any:
    # A context is what Parameter.shell_complete and get_params need; nothing is parsed or run.
    settings = dict(getattr(command, "context_settings", None) or {})
    return command.context_class(command, info_name=name, parent=parent, resilient_parsing=True, **settings)


def _is_group(command: Any) -> bool:
    return callable(getattr(command, "list_commands", None))


def _option_list(command: Any, ctx: Any) -> list[Any]:
    return [p for p in command.get_params(ctx) if p.param_type_name == "option"]


def _option_named(command: Any, ctx: Any, name: str) -> Any:
    return next((p for p in _option_list(command, ctx) if name in p.opts or name in p.secondary_opts), None)


def _takes_value(option: Any) -> bool:
    return not option.is_flag and not option.count and option.nargs == 1


def _option_typed(command: Any, ctx: Any, word: str) -> tuple[Any, Any]:
    """The option a complete word names, and that option again when its value is the next word."""
    if word.startswith("--"):
        name, equals, _ = word.partition("=")
        option = _option_named(command, ctx, name)
        return option, (option if option is not None and not equals and _takes_value(option) else None)
    for i, letter in enumerate(word[1:], 1):  # -wn 5, -n5: short options run together
        option = _option_named(command, ctx, f"-{letter}")
        if option is None:
            return None, None
        if _takes_value(option):
            return option, (option if i == len(word) - 1 else None)
    return option, None


def _options(command: Any, ctx: Any, incomplete: str, given: set[str]) -> list[Item]:
    """Option names; short ones only once a single `-` is typed, and not those given already (unless repeatable)."""
    short = incomplete.startswith("-") and not incomplete.startswith("--")
    out = []
    for option in _option_list(command, ctx):
        if option.hidden or (option.name in given and not option.multiple):
            continue
        for name in [*option.opts, *option.secondary_opts]:
            if name.startswith(incomplete) and (short or name.startswith("--")):
                out.append(("plain", name, _first_sentence(option.help or "")))
    return out


def _values(option: Any, ctx: Any, incomplete: str, prefix: str = "") -> list[Item]:
    """The option's completer's values (Parameter.shell_complete), each with its kind."""
    found: list[tuple[Any, str | None, str]] = [(item.value, item.type, item.help or "") for item in option.shell_complete(ctx, incomplete)]
    fallback = next((c for name, c in _UNDECLARED.items() if name in getattr(option, "opts", ())), None)
    if not found and fallback is not None:
        found = [(v[0], None, v[1]) if isinstance(v, tuple) else (v, None, "") for v in fallback(incomplete)]
    out = []
    for value, type_, help_ in found:
        kind = getattr(value, "kind", None) or (type_ if type_ in ("file", "dir") else None)
        if kind is None:
            kind = "partial" if str(value).endswith((":", "=", "/")) else "plain"
            if kind == "partial" and value == incomplete:
                continue  # `cuda:` typed: the id is the user's to give
        out.append((kind, prefix + str(value), help_))
    return out


def _readline_cut(incomplete: str, breaks: str) -> str:
    """What readline keeps of the word typed: up to its last COMP_WORDBREAKS character (`=`, `:`). A value
    replaces only the rest: `--only=ver` gets `versions`, `cpu:0,t` gets `0,tpu:`."""
    breaks = "".join(c for c in breaks if c not in " \t\n\"'")
    cut = max((incomplete.rfind(c) for c in breaks), default=-1)
    return incomplete[: cut + 1]


def _first_sentence(text: str, limit: int = 70) -> str:
    """An option's help as a list of candidates has room for: its first sentence, cut at a word."""
    text = text.split(". ")[0].rstrip(".")
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit - 3)
    return text[: cut if cut > 0 else limit - 3] + "..."


def _flat(text: str) -> str:
    return " ".join(str(text).split()) if any(c in text for c in "\t\n\r") else str(text)


# ---- the scripts: each hands the line to devctl and acts on each candidate's kind ---------------------------

_HEADER = "# {shell} completion for devctl. Generated by `python -m devctl.cli.generated --update`; do not edit.\n"

_BASH = r"""# Install: devctl completion bash --install (devctl completion --help)
_devctl_completion() {
    local kind value
    COMPREPLY=()
    while IFS=$'\t' read -r kind value; do
        case $kind in
            plain) COMPREPLY+=("$value") ;;
            partial) COMPREPLY+=("$value"); compopt -o nospace ;;
            file) compopt -o default ;;
            dir) compopt -o dirnames ;;
        esac
    done < <(_DEVCTL_COMPLETE=bash _DEVCTL_COMPLETE_LINE="${COMP_LINE:0:COMP_POINT}" \
             _DEVCTL_COMPLETE_WORDBREAKS="$COMP_WORDBREAKS" "$1" 2>/dev/null)
    return 0
}
complete -F _devctl_completion devctl
"""

_ZSH = r"""# Install: devctl completion zsh --install, then add its directory to $fpath before compinit (devctl completion --help)
_devctl() {
    local -a lines plain partial
    local line kind value help
    lines=("${(@f)$(_DEVCTL_COMPLETE=zsh _DEVCTL_COMPLETE_LINE="${words[1,CURRENT]}" devctl 2>/dev/null)}")
    for line in $lines; do
        IFS=$'\t' read -r kind value help <<< "$line"
        value=${value//:/\\:}
        case $kind in
            plain) plain+=("$value${help:+:$help}") ;;
            partial) partial+=("$value${help:+:$help}") ;;
            file|dir)
                [[ $PREFIX == -*=* ]] && compset -P '*='
                if [[ $kind == dir ]]; then _files -/; else _files; fi ;;
        esac
    done
    (( $#plain )) && _describe -t values value plain
    (( $#partial )) && _describe -t values value partial -S ''
    return 0
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _devctl "$@"  # autoloaded from $fpath: this TAB press
else
    compdef _devctl devctl  # sourced
fi
"""

_FISH = r"""# Install: devctl completion fish --install (devctl completion --help)
function __devctl_complete
    set -l token (commandline -ct)
    set -l prefix (string match -r -- '^--[^=]*=' $token)
    set -l name (string replace -r -- '^--[^=]*=' '' $token)
    set -lx _DEVCTL_COMPLETE fish
    set -lx _DEVCTL_COMPLETE_LINE (commandline -cp | string collect)
    for line in (devctl 2>/dev/null)
        set -l field (string split -m 2 \t -- $line)
        switch $field[1]
            case plain partial
                string join \t -- $field[2..-1]
            case file
                __fish_complete_path "$name" | string replace -r -- '^' "$prefix"
            case dir
                __fish_complete_directories "$name" | string replace -r -- '^' "$prefix"
        end
    end
end
complete --command devctl --no-files --arguments '(__devctl_complete)'
"""

SCRIPTS = {"bash": _BASH, "zsh": _ZSH, "fish": _FISH}


def script(shell: str) -> str:
    """The completion script for `shell`, as the generator writes it (devctl/completions/ and completions/)."""
    header = _HEADER.format(shell=shell)
    if shell == "zsh":  # `#compdef` must stay the first line for zsh's autoloader
        return "#compdef devctl\n" + header + SCRIPTS[shell]
    return header + SCRIPTS[shell]


# ---- `devctl completion SHELL [--install]` ------------------------------------------------------------------


def shipped(shell: str) -> str:
    """The script the installed package carries for `shell` (what `devctl completion SHELL` prints)."""
    try:
        with open(os.path.join(PACKAGE_DIR, FILES[shell]), encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:  # a source tree whose scripts were never generated: the same text, made here
        return script(shell)


def _xdg(variable: str, default: str) -> str:
    # The XDG base directory spec: a relative path in the variable is invalid and is ignored.
    value = os.environ.get(variable, "")
    return value if os.path.isabs(value) else os.path.expanduser(default)


def install_path(shell: str) -> str:
    """Where `shell` looks for this user's completion of `devctl` without any configuration (zsh: a directory
    to add to $fpath once)."""
    if shell == "bash":
        # bash-completion's own lookup: $BASH_COMPLETION_USER_DIR (the first of its entries), else XDG data home
        user_dir = os.environ.get("BASH_COMPLETION_USER_DIR", "").split(":")[0]
        base = user_dir if os.path.isabs(user_dir) else os.path.join(_xdg("XDG_DATA_HOME", "~/.local/share"), "bash-completion")
        return os.path.join(base, "completions", "devctl")
    if shell == "zsh":
        return os.path.join(os.path.expanduser("~/.zfunc"), FILES["zsh"])
    return os.path.join(_xdg("XDG_CONFIG_HOME", "~/.config"), "fish", "completions", FILES["fish"])


def _rc_advice(shell: str, path: str) -> list[str]:
    """What the user still has to do for `shell` to load the script at `path`."""
    import shlex

    if shell == "bash":
        return [
            "the bash-completion package loads it in new shells; where that package is not installed, add to ~/.bashrc:",
            f"    source {shlex.quote(path)}",
        ]
    if shell == "zsh":
        directory = os.path.dirname(path)
        home = os.path.expanduser("~")
        shown_dir = "~" + directory[len(home) :] if directory.startswith(home + os.sep) else shlex.quote(directory)
        rc = os.path.join(os.environ["ZDOTDIR"], ".zshrc") if os.environ.get("ZDOTDIR") else "~/.zshrc"
        return [
            f"zsh finds it through $fpath: add to {rc}, before compinit runs:",
            f"    fpath=({shown_dir} $fpath)",
            f"and, where {rc} does not run compinit yet, after that line:",
            "    autoload -Uz compinit && compinit",
        ]
    return ["fish loads it in new shells; nothing to add to its configuration."]


def install(shell: str) -> tuple[str, list[str]]:
    """Write the shipped script for `shell` to install_path(shell) whole (devctl.safefs.write_atomic); the path
    and what to add to the shell's startup file. A symbolic link at the path is refused, not replaced: it is
    the user's (a dotfiles manager's), and whatever it points to is not devctl's to write."""
    from devctl.cli.options import shown
    from devctl.errors import UsageError
    from devctl.safefs import write_atomic

    path = install_path(shell)
    if os.path.islink(path):
        raise UsageError(
            f"{shown(path)} is a symbolic link (to {shown(os.readlink(path))}); devctl neither writes through nor replaces it: "
            f"remove it and run again, or write the script yourself with `devctl completion {shell} > FILE`"
        )
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, shipped(shell).encode())
    except OSError as e:
        raise UsageError(f"the {shell} completion was not written to {shown(path)}: {e.strerror or e}") from None
    return path, _rc_advice(shell, path)


def completion_command(
    shell: Annotated[str, typer.Argument(metavar="bash|zsh|fish", autocompletion=shells, help="The shell.", show_default=False)],
    install_: Annotated[
        bool,
        typer.Option(
            "--install",
            help="Write the script where the shell looks for this user's completions (bash: ~/.local/share/bash-completion/completions/devctl, "
            "zsh: ~/.zfunc/_devctl, fish: ~/.config/fish/completions/devctl.fish) and say what to add to its startup file, if anything.",
        ),
    ] = False,
) -> None:
    """Print or install the shell completion script (bash, zsh, fish)."""
    from devctl.cli.options import shown
    from devctl.errors import UsageError

    name = shell.strip().lower()
    if name not in SHELLS:
        raise UsageError(f"unknown shell {shown(shell)}; accepted: {', '.join(SHELLS)}")
    if not install_:
        sys.stdout.write(shipped(name))
        return
    path, advice = install(name)
    sys.stdout.write("".join(line + "\n" for line in [f"wrote the {name} completion for devctl to {path}", *advice]))
