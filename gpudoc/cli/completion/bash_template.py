"""The bash completion script's template (filled by ``gpudoc.cli.completion.scripts``)."""

BASH = r"""# bash completion for gpudoc                                  -*- shell-script -*-
@@HEADER@@
#
# Install: copy to ~/.local/share/bash-completion/completions/gpudoc (bash-completion loads it
# on first use), or `source <(gpudoc completions bash)` in ~/.bashrc.

# Where the gpudoc being completed keeps its shipped profiles: a checkout (bin/gpudoc beside
# profiles/), an install prefix (bin/gpudoc beside share/gpudoc/profiles), else the console
# script's own Python says (once). Cached per shell, keyed by the executable.
_gpudoc_shipped_dir() {
    local exe=$1 real root line dir=
    if [[ $exe != */* ]]; then
        exe=$(type -P -- "$exe" 2>/dev/null) || exe=$1
    elif [[ $exe != /* ]]; then
        exe=$PWD/$exe
    fi
    if [[ $exe == "${_gpudoc_shipped_key-}" ]]; then
        REPLY=$_gpudoc_shipped_val
        return
    fi
    real=$(readlink -f -- "$exe" 2>/dev/null) || real=$exe
    root=${real%/*}
    root=${root%/*}
    if [[ -d $root/profiles && -d $root/gpudoc ]]; then
        dir=$root/profiles
    elif [[ -d $root/share/gpudoc/profiles ]]; then
        dir=$root/share/gpudoc/profiles
    elif [[ -d $root/../profiles && -d $root/../gpudoc ]]; then
        dir=${root%/*}/profiles  # the checkout's .venv that bin/gpudoc made (editable install)
    elif [[ -f $real ]] && IFS= read -r line <"$real" && [[ $line == '#!'*python* ]]; then
        local -a py
        read -r -a py <<<"${line#'#!'}"
        dir=$("${py[@]}" -m gpudoc.shellcomplete shipped-dir 2>/dev/null)
    fi
    _gpudoc_shipped_key=$exe
    _gpudoc_shipped_val=$dir
    REPLY=$dir
}

# Profile names, as `gpudoc -p NAME` looks them up (gpudoc/profiles/loader.py search_dirs): the
# project's nearest .gpudoc/profiles, the user's, the shipped ones.
_gpudoc_profiles() {
    local d f _gpudoc_dir
    _gpudoc_nearest profiles
    local -a dirs=("$_gpudoc_dir/profiles" "${XDG_CONFIG_HOME:-$HOME/.config}/gpudoc/profiles")
    _gpudoc_shipped_dir "$1"
    [[ -n $REPLY ]] && dirs+=("$REPLY")
    _gpudoc_names=()
    for d in "${dirs[@]}"; do
        for f in "$d"/*.toml; do
            [[ -f $f ]] || continue
            f=${f##*/}
            _gpudoc_names+=("${f%.toml}")
        done
    done
}

# Where the runs are: $GPUDOC_HOME, else the nearest .gpudoc/runs up to the project's root (a
# directory with .git) and below $HOME, else ./.gpudoc (gpudoc.runs.store.RunStore.locate).
_gpudoc_home() {
    _gpudoc_dir=${GPUDOC_HOME:-}
    [[ -n $_gpudoc_dir ]] && return
    _gpudoc_nearest runs
}

# The nearest .gpudoc holding the folder $1 from the working directory up, to the project's root
# (a directory with .git) and below $HOME, else ./.gpudoc (gpudoc/upward.py).
_gpudoc_nearest() {
    local d=$PWD
    while :; do
        [[ $d != "$PWD" && $d == "$HOME" ]] && break
        if [[ -d $d/.gpudoc/$1 ]]; then _gpudoc_dir=$d/.gpudoc; return; fi
        [[ -e $d/.git || -z $d || $d == / ]] && break
        d=${d%/*}
        [[ -z $d ]] && d=/
    done
    _gpudoc_dir=$PWD/.gpudoc
}

# Run ids: directories of the runs directory that hold a run.json.
_gpudoc_runs() {
    local f _gpudoc_dir
    _gpudoc_names=()
    _gpudoc_home
    for f in "$_gpudoc_dir"/runs/*/run.json; do
        [[ -f $f ]] || continue
        f=${f%/run.json}
        _gpudoc_names+=("${f##*/}")
    done
}

# Per command path: its switches, those taking a value, its subcommands, its positionals.
_gpudoc_spec() {
    case $1 in
@@SPECS@@
    esac
}

# What the value of switch $2 of command path $1 is.
_gpudoc_value_kind() {
    case "$1|$2" in
@@VALUES@@
        *) REPLY= ;;
    esac
}

_gpudoc_values() {
    case $1 in
        profiles)
            # -p also takes a file: ./gpudoc.toml, ../shared/a.toml
            if [[ $cur == */* || $cur == .* ]]; then
                _gpudoc_values files
                return
            fi
            _gpudoc_profiles "${COMP_WORDS[0]}"
            COMPREPLY=($(compgen -W "${_gpudoc_names[*]}" -- "$cur"))
            ;;
        runs)
            _gpudoc_runs
            COMPREPLY=($(compgen -W "${_gpudoc_names[*]}" -- "$cur"))
            ;;
        shells) COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")) ;;
        files)
            compopt -o filenames 2>/dev/null
            COMPREPLY=($(compgen -f -- "$cur"))
            ;;
        dirs)
            compopt -o filenames 2>/dev/null
            COMPREPLY=($(compgen -d -- "$cur"))
            ;;
        choice:*) COMPREPLY=($(compgen -W "${1#choice:}" -- "$cur")) ;;
        csv:*)
            # --only driver,env.<TAB>: complete the last item, keep the ones before it
            local done=
            [[ $cur == *,* ]] && done=${cur%,*},
            COMPREPLY=($(compgen -P "$done" -W "${1#csv:}" -- "${cur##*,}"))
            compopt -o nospace 2>/dev/null
            ;;
        *) COMPREPLY=() ;;
    esac
}

# The job's command line starts at word $1: complete it as the shell would on its own.
_gpudoc_command_offset() {
    if declare -F _command_offset >/dev/null 2>&1; then
        _command_offset "$1"
        return
    fi
    # Without bash-completion: command names for the first word, files after it.
    if ((COMP_CWORD == $1)); then
        COMPREPLY=($(compgen -c -- "$cur"))
    else
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}

_gpudoc_pos_kind() {
    local -a kinds=($_gpudoc_pos)
    local n=${#kinds[@]}
    REPLY=
    ((n == 0)) && return
    if (($1 < n)); then
        REPLY=${kinds[$1]}
    elif [[ ${kinds[n - 1]} == *'*' ]]; then
        REPLY=${kinds[n - 1]}
    fi
    REPLY=${REPLY%'*'}
}

_gpudoc() {
    local cur=${COMP_WORDS[COMP_CWORD]} path= w opt= i npos=0
    local _gpudoc_sw _gpudoc_argsw _gpudoc_subs _gpudoc_pos
    local -a _gpudoc_names
    COMPREPLY=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        _gpudoc_spec "$path"
        if [[ $w == -- ]]; then
            _gpudoc_pos_kind 0
            if [[ $REPLY == command ]]; then
                _gpudoc_command_offset $((i + 1))
                return
            fi
        elif [[ $w == -?* ]]; then
            # a switch; skip its value ("--profile x", or "--profile = x" as bash splits at '=')
            if [[ " $_gpudoc_argsw " == *" $w "* ]]; then
                if [[ ${COMP_WORDS[i + 1]} == = ]]; then ((i += 2)); else ((i += 1)); fi
            fi
        elif [[ -n $_gpudoc_subs && " $_gpudoc_subs " == *" $w "* ]]; then
            path=${path:+$path }$w
            npos=0
        elif [[ $w != = ]]; then
            _gpudoc_pos_kind $npos
            if [[ $REPLY == command ]]; then
                _gpudoc_command_offset "$i"
                return
            fi
            ((npos++))
        fi
    done
    _gpudoc_spec "$path"

    # The value of a switch: "-p <TAB>", "--profile=<TAB>" (bash splits at '=').
    if [[ $cur == = ]]; then
        opt=${COMP_WORDS[COMP_CWORD - 1]}
        cur=
    elif [[ ${COMP_WORDS[COMP_CWORD - 1]} == = ]]; then
        opt=${COMP_WORDS[COMP_CWORD - 2]}
    elif ((COMP_CWORD > 1)); then
        opt=${COMP_WORDS[COMP_CWORD - 1]}
    fi
    if [[ -n $opt && " $_gpudoc_argsw " == *" $opt "* ]]; then
        _gpudoc_value_kind "$path" "$opt"
        _gpudoc_values "$REPLY"
        return
    fi

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$_gpudoc_sw" -- "$cur"))
    elif [[ -n $_gpudoc_subs ]]; then
        COMPREPLY=($(compgen -W "$_gpudoc_subs" -- "$cur"))
    else
        _gpudoc_pos_kind $npos
        if [[ $REPLY == command ]]; then
            _gpudoc_command_offset "$COMP_CWORD"
        else
            _gpudoc_values "$REPLY"
        fi
    fi
}

complete -F _gpudoc gpudoc
"""
