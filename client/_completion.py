"""Shell completion for txctl: `txctl completion bash|zsh` prints a script generated from the
argument parser (subcommands, flags, which flags take a value), and `txctl __complete KIND`
prints the words that need asking at completion time: the daemon's schedulers and its jobs'
app ids, and the builtin components.

`__complete` never starts a daemon and never hangs: without a daemon listening it prints
nothing, and each call to one is bounded by DEADLINE (SCHEDULERS_DEADLINE for the
schedulers). zsh runs the same function through its bash-completion emulation
(bashcompinit), so both shells complete alike.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterable

DEADLINE = 1.0  # seconds for a completion query to the daemon
# The schedulers' query may be the daemon's first use of its scheduler modules, which it
# imports then (0.5 s idle, over 1 s on a busy host): a TAB after `-s` waits for that once
# rather than offer nothing.
SCHEDULERS_DEADLINE = 5.0
MAX_HANDLES = 500  # the newest jobs offered
# Flags whose value names a file, and positionals / flag values asked from `__complete`.
_FILE_DESTS = {"socket", "state_dir", "config"}
_QUERIED_DESTS = {"scheduler": "schedulers", "handle": "handles", "component": "components"}

_BASH = r"""# txctl completion for bash: eval "$(txctl completion bash)"
_txctl_query() {
    command "${COMP_WORDS[0]}" __complete "$1" "${_txctl_sock[@]}" 2>/dev/null
}
_txctl() {
    local cur=${COMP_WORDS[COMP_CWORD]} cmd= flag= npos=0 i word
    local -a _txctl_sock=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        if [[ -n $flag ]]; then
            [[ $flag == --socket ]] && _txctl_sock=(--socket "$word")
            flag=
        elif [[ $word == -* && ( $cmd != run || $npos == 0 ) ]]; then
            case "$cmd:$word" in
%(value_flags)s) flag=$word ;;
            esac
        elif [[ -z $cmd ]]; then
            cmd=$word
        else
            npos=$((npos + 1))
        fi
    done
    COMPREPLY=()
    if [[ -n $flag ]]; then
        case "$cmd:$flag" in
%(flag_values)s        esac
        return 0
    fi
    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "%(global_flags)s" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "%(commands)s" -- "$cur"))
        fi
        return 0
    fi
    if [[ $cur == -* && ( $cmd != run || $npos == 0 ) ]]; then
        case $cmd in
%(command_flags)s        esac
        return 0
    fi
    case "$cmd:$npos" in
%(positionals)s    esac
    return 0
}
complete -F _txctl txctl
"""

_ZSH = """# txctl completion for zsh: source <(txctl completion zsh)
autoload -U +X compinit && { (( ${+_comps} )) || compinit -u; }
autoload -U +X bashcompinit && bashcompinit
"""


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            visible = {a.dest for a in action._choices_actions}
            return {n: p for n, p in action.choices.items() if n in visible}
    return {}


def _flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]


def _words(values: Iterable[str]) -> str:
    return " ".join(values)


def _reply(action: argparse.Action) -> str | None:
    """The shell that completes this flag's value or positional, or None for nothing."""
    if action.choices:
        words = _words(str(c) for c in action.choices)
        return f'COMPREPLY=($(compgen -W "{words}" -- "$cur"))'
    if action.dest in _FILE_DESTS:
        return 'COMPREPLY=($(compgen -f -- "$cur"))'
    if action.dest == "state":
        from txd.v1 import AppState

        states = _words(v.name.lower() for v in AppState.DESCRIPTOR.values)
        return f'COMPREPLY=($(compgen -W "{states}" -- "$cur"))'
    if (kind := _QUERIED_DESTS.get(action.dest)) is not None:
        return f'COMPREPLY=($(compgen -W "$(_txctl_query {kind})" -- "$cur"))'
    return None


def _case(patterns: list[str], body: str) -> str:
    """A `case` branch; the patterns are flag and command names (no quoting needed), and
    `*` is meant as a glob."""
    return f"            {'|'.join(patterns)}) {body} ;;\n"


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for `shell` (bash or zsh), from txctl's parser."""
    commands = _subcommands(parser)
    scopes = {"": parser, **commands}
    value_flags: list[str] = []
    flag_values = command_flags = positionals = ""
    for name, sub in scopes.items():
        for action in _flags(sub):
            if action.nargs == 0:
                continue
            value_flags += [f"{name}:{o}" for o in action.option_strings]
            if (reply := _reply(action)) is not None:
                flag_values += _case([f"{name}:{o}" for o in action.option_strings], reply)
        if not name:
            continue
        options = _words(o for a in _flags(sub) for o in a.option_strings)
        command_flags += _case([name], f'COMPREPLY=($(compgen -W "{options}" -- "$cur"))')
        pos = [a for a in sub._actions if not a.option_strings and a.nargs != argparse.REMAINDER]
        for i, action in enumerate(pos):
            if (reply := _reply(action)) is not None:
                if action.dest == "component":  # or a file.py:function
                    reply = reply[:-1] + ' $(compgen -f -- "$cur"))'
                positionals += _case([f"{name}:{i}"], reply)
        if any(a.nargs == argparse.REMAINDER for a in sub._actions):  # a component's arguments
            positionals += _case([f"{name}:*"], 'COMPREPLY=($(compgen -f -- "$cur"))')
    text = _BASH % {
        "value_flags": "            " + "|".join(value_flags),
        "flag_values": flag_values,
        "global_flags": _words(o for a in _flags(parser) for o in a.option_strings),
        "commands": _words(commands),
        "command_flags": command_flags,
        "positionals": positionals,
    }
    return text if shell == "bash" else _ZSH + text


# -- __complete -------------------------------------------------------------------------------


def complete(argv: list[str]) -> int:
    """`txctl __complete KIND [--socket S]`: the words of KIND, one a line, or nothing."""
    kind = argv[0] if argv else ""
    socket = argv[2] if argv[1:2] == ["--socket"] and len(argv) > 2 else None
    if kind == "components":
        from txd.client import components

        print("\n".join(components.builtins()))
        return 0
    if kind not in ("handles", "schedulers"):
        return 2
    try:
        words = asyncio.run(_ask_daemon(kind, socket))
    except Exception:  # no answer in time, or none at all: complete nothing, say nothing
        return 1
    if words:
        print("\n".join(words))
    return 0


async def _ask_daemon(kind: str, socket: str | None) -> list[str]:
    from txd import defaults
    from txd.client._async import AsyncClient
    from txd.client._daemon import is_listening

    path = defaults.socket_path(socket)
    if not is_listening(path):  # never start one
        return []
    deadline = SCHEDULERS_DEADLINE if kind == "schedulers" else DEADLINE
    async with asyncio.timeout(deadline), AsyncClient(path, timeout=deadline) as client:
        if kind == "schedulers":
            return [s.name for s in (await client.schedulers()).schedulers if not s.load_error]
        page = await client.list_page(page_size=MAX_HANDLES)
        return [s.app_id for s in page.apps]
