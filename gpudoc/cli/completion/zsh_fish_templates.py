"""The zsh and fish completion scripts' templates (filled by ``gpudoc.cli.completion.scripts``)."""

ZSH = r"""#compdef gpudoc
@@HEADER@@
#
# Install: put this file (named _gpudoc) in a directory of $fpath before compinit runs, e.g.
# ~/.zfunc with `fpath=(~/.zfunc $fpath)` in ~/.zshrc.

# Where the gpudoc being completed keeps its shipped profiles (see the bash script); cached.
(( $+functions[_gpudoc_shipped_dir] )) ||
_gpudoc_shipped_dir() {
    local exe=${_gpudoc_exe:-gpudoc} real root line dir=
    if [[ $exe != */* ]]; then
        exe=${commands[$exe]:-$exe}
    fi
    exe=${exe:a}
    if [[ $exe == ${_gpudoc_shipped_key-} ]]; then
        REPLY=$_gpudoc_shipped_val
        return
    fi
    real=${exe:A}
    root=${real:h:h}
    if [[ -d $root/profiles && -d $root/gpudoc ]]; then
        dir=$root/profiles
    elif [[ -d $root/share/gpudoc/profiles ]]; then
        dir=$root/share/gpudoc/profiles
    elif [[ -d $root:h/profiles && -d $root:h/gpudoc ]]; then
        dir=$root:h/profiles  # the checkout's .venv that bin/gpudoc made (editable install)
    elif [[ -f $real ]] && IFS= read -r line <$real && [[ $line == '#!'*python* ]]; then
        dir=$(${=${line#\#!}} -m gpudoc.shellcomplete shipped-dir 2>/dev/null)
    fi
    typeset -g _gpudoc_shipped_key=$exe _gpudoc_shipped_val=$dir
    REPLY=$dir
}

# Profile names, as `gpudoc -p NAME` looks them up; -p also takes a .toml file.
(( $+functions[_gpudoc_profiles] )) ||
_gpudoc_profiles() {
    local -a dirs names expl
    local d
    if [[ $PREFIX == */* || $PREFIX == .* ]]; then
        _files -g '*.toml(-.)'
        return
    fi
    dirs=($(_gpudoc_nearest profiles)/profiles ${XDG_CONFIG_HOME:-$HOME/.config}/gpudoc/profiles)
    _gpudoc_shipped_dir
    [[ -n $REPLY ]] && dirs+=($REPLY)
    for d in $dirs; do
        names+=($d/*.toml(N-.:t:r))
    done
    _wanted profiles expl 'profile' compadd -a - names
}

# The nearest .gpudoc holding the folder $1 from the working directory up, to the project's root
# (a directory with .git) and below $HOME, else ./.gpudoc (gpudoc/upward.py); printed.
(( $+functions[_gpudoc_nearest] )) ||
_gpudoc_nearest() {
    local d=$PWD
    while :; do
        [[ $d != $PWD && $d == $HOME ]] && break
        [[ -d $d/.gpudoc/$1 ]] && { print -r -- $d/.gpudoc; return }
        [[ -e $d/.git || $d == / ]] && break
        d=${d:h}
    done
    print -r -- $PWD/.gpudoc
}

# Where the runs are: $GPUDOC_HOME, else the nearest .gpudoc/runs up to the project's root (a
# directory with .git) and below $HOME, else ./.gpudoc (gpudoc.runs.store.RunStore.locate).
(( $+functions[_gpudoc_runs] )) ||
_gpudoc_runs() {
    local -a ids expl
    local dir=${GPUDOC_HOME:-}
    [[ -z $dir ]] && dir=$(_gpudoc_nearest runs)
    ids=($dir/runs/*/run.json(N-.:h:t))
    _wanted runs expl 'run id' compadd -a - ids
}

@@FUNCTIONS@@

_gpudoc() {
    local _gpudoc_exe=$words[1]
    _gpudoc__root "$@"
}

if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    # autoloaded from $fpath by compinit
    _gpudoc "$@"
else
    # sourced directly
    compdef _gpudoc gpudoc
fi
"""

FISH = r"""# fish completion for gpudoc
@@HEADER@@
#
# Install: copy to ~/.config/fish/completions/gpudoc.fish (fish loads it on first use).

complete -c gpudoc -e

# Where the gpudoc being completed keeps its shipped profiles (see the bash script); cached.
function __gpudoc_shipped_dir
    set -l exe (command -s gpudoc)
    test -n "$exe"; or return
    if test "$exe" = "$__gpudoc_shipped_key"
        printf '%s\n' $__gpudoc_shipped_val
        return
    end
    set -l real (path resolve -- $exe 2>/dev/null; or realpath -- $exe 2>/dev/null; or echo $exe)
    set -l root (dirname (dirname $real[1]))
    set -l dir
    if test -d $root/profiles -a -d $root/gpudoc
        set dir $root/profiles
    else if test -d $root/share/gpudoc/profiles
        set dir $root/share/gpudoc/profiles
    else if test -d (dirname $root)/profiles -a -d (dirname $root)/gpudoc
        # the checkout's .venv that bin/gpudoc made (editable install)
        set dir (dirname $root)/profiles
    else if test -f $real[1]
        read -l line <$real[1]
        if string match -q -- '#!*python*' $line
            set -l py (string split ' ' -- (string sub -s 3 -- $line))
            set dir ($py -m gpudoc.shellcomplete shipped-dir 2>/dev/null)
        end
    end
    set -g __gpudoc_shipped_key $exe
    set -g __gpudoc_shipped_val $dir
    printf '%s\n' $dir
end

# The nearest .gpudoc holding the folder $argv[1] from the working directory up, to the project's
# root (a directory with .git) and below $HOME, else ./.gpudoc (gpudoc/upward.py); printed.
function __gpudoc_nearest
    set -l d $PWD
    while true
        if test "$d" != "$PWD"; and test "$d" = "$HOME"
            break
        end
        if test -d $d/.gpudoc/$argv[1]
            echo $d/.gpudoc
            return
        end
        if test -e $d/.git; or test "$d" = /
            break
        end
        set d (path dirname $d 2>/dev/null; or dirname $d)
    end
    echo $PWD/.gpudoc
end

# Profile names, as `gpudoc -p NAME` looks them up (gpudoc/profiles/loader.py search_dirs).
function __gpudoc_profiles
    set -l config $XDG_CONFIG_HOME
    test -n "$config"; or set config ~/.config
    set -l dirs (__gpudoc_nearest profiles)/profiles $config/gpudoc/profiles (__gpudoc_shipped_dir)
    for d in $dirs
        for f in $d/*.toml
            test -f $f; and string replace -r '^.*/(.*)\.toml$' '$1' -- $f
        end
    end
end

# Where the runs are: $GPUDOC_HOME, else the nearest .gpudoc/runs up to the project's root (a
# directory with .git) and below $HOME, else ./.gpudoc (gpudoc.runs.store.RunStore.locate).
function __gpudoc_runs
    set -l home $GPUDOC_HOME
    test -n "$home"; or set home (__gpudoc_nearest runs)
    for f in $home/runs/*/run.json
        test -f $f; and string replace -r '^.*/([^/]*)/run\.json$' '$1' -- $f
    end
end

function __gpudoc_argsw
    switch $argv[1]
@@ARGSW@@
    end
end

function __gpudoc_subs
    switch $argv[1]
@@SUBS@@
    end
end

function __gpudoc_poskinds
    switch $argv[1]
@@POS@@
    end
end

# Reads the words before the cursor into __gpudoc_path (the command path, "profile show"),
# __gpudoc_npos (positional words so far) and __gpudoc_cmd (where the job's command line starts,
# 0 before it).
function __gpudoc_parse
    # fish asks every condition below on each TAB: parse the line once
    set -l line (commandline -pc)
    if set -q __gpudoc_parsed; and test "$__gpudoc_parsed" = "$line"
        return
    end
    set -g __gpudoc_parsed $line
    set -l tokens (commandline -opc)
    set -g __gpudoc_path ''
    set -g __gpudoc_npos 0
    set -g __gpudoc_cmd 0
    set -l argsw (string split ' ' -- (__gpudoc_argsw ''))
    set -l subs (string split ' ' -- (__gpudoc_subs ''))
    set -l kinds (string split ' ' -- (__gpudoc_poskinds ''))
    set -l i 2
    set -l n (count $tokens)
    while test $i -le $n
        set -l t $tokens[$i]
        if test "$t" = --
            if string match -q 'command*' -- $kinds[1]
                set -g __gpudoc_cmd (math $i + 1)
                return
            end
        else if string match -q -- '-?*' $t
            contains -- $t $argsw; and set i (math $i + 1)
        else if test -n "$subs[1]"; and contains -- $t $subs
            set -g __gpudoc_path (string trim -- "$__gpudoc_path $t")
            set argsw (string split ' ' -- (__gpudoc_argsw $__gpudoc_path))
            set subs (string split ' ' -- (__gpudoc_subs $__gpudoc_path))
            set kinds (string split ' ' -- (__gpudoc_poskinds $__gpudoc_path))
            set -g __gpudoc_npos 0
        else
            if string match -q 'command*' -- $kinds[1]
                set -g __gpudoc_cmd $i
                return
            end
            set -g __gpudoc_npos (math $__gpudoc_npos + 1)
        end
        set i (math $i + 1)
    end
end

# True at command path $argv[1], before any job command line.
function __gpudoc_at
    __gpudoc_parse
    test $__gpudoc_cmd -eq 0 -a "$__gpudoc_path" = "$argv[1]"
end

# True at command path $argv[1] when $argv[2] positionals came before ("N+" for N or more).
function __gpudoc_pos
    __gpudoc_at $argv[1]; or return
    set -l want (string replace '+' '' -- $argv[2])
    if string match -q '*+' -- $argv[2]
        test $__gpudoc_npos -ge $want
    else
        test $__gpudoc_npos -eq $want
    end
end

# After `gpudoc run --`: the job's own command line, completed as fish would on its own.
function __gpudoc_in_command
    __gpudoc_parse
    test $__gpudoc_cmd -gt 0
end

function __gpudoc_complete_command
    __gpudoc_parse
    set -l tokens (commandline -opc)
    set -l words
    if test $__gpudoc_cmd -le (count $tokens)
        set words (string escape -- $tokens[$__gpudoc_cmd..-1])
    end
    complete -C (string join ' ' -- $words (commandline -ct))
end

complete -c gpudoc -f
complete -c gpudoc -n __gpudoc_in_command -x -a '(__gpudoc_complete_command)'
@@COMPLETES@@
"""
