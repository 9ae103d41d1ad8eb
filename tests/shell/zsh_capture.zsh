#!/usr/bin/env zsh
# Drives zsh's real completion system for tests: starts an interactive zsh in a pseudo-terminal
# (zpty), loads compinit with the completion directory given as $1 on $fpath, then for each
# further argument types it, presses TAB, and prints every match compadd received, one per line,
# followed by a "<<END>>" line. Matches are captured by wrapping compadd, the technique of
# zsh-capture-completion: the widget is the real one, only the listing is intercepted.
zmodload zsh/zpty || exit 1
fpath_dir=$1; shift

zpty z zsh -f -i
zpty -w z "PROMPT= RPROMPT= ; unsetopt zle_bracketed_paste 2>/dev/null"
zpty -w z "fpath=(${(q)fpath_dir} \$fpath)"
zpty -w z 'autoload -Uz compinit && compinit -u -D'
zpty -w z "zstyle ':completion:*' list-grouped false"
zpty -w z "zstyle ':completion:*' insert-tab false"
zpty -w z "zstyle ':completion:*' menu no"
zpty -w z "zstyle ':completion:*' list-prompt ''"
zpty -w z "zstyle ':completion:*' select-prompt ''"
zpty -w z 'bindkey "^I" complete-word'
# Every candidate passes through compadd; -A stores the ones matching what was typed.
zpty -w z 'compadd () {
    if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return $?; fi
    typeset -a __hits; builtin compadd -A __hits "$@"; local ret=$?
    (( $#__hits )) && print -r -l -- "<<M>>"${^__hits} >&2
    return ret
}'
zpty -w z 'exec 2>/dev/tty'
# after each TAB, ^T (not a prefix key: no KEYTIMEOUT wait) prints a marker and clears the line
zpty -w z 'finish () { print -r -- "<<END>>" >/dev/tty; zle kill-whole-line; }'
zpty -w z 'zle -N finish; bindkey "^T" finish'
zpty -w z 'print -r -- "<<READY>>"'
zpty -r z line '*<<READY>>*'
zpty -r z line '*<<READY>>*'

for typed in "$@"; do
    zpty -w -n z "$typed"$'\t'$'\x14'
    while zpty -r z line; do
        line=${line//$'\r'/}; line=${line%$'\n'}
        if [[ $line == *'<<END>>'* ]]; then break; fi
        if [[ $line == *'<<M>>'* ]]; then
            print -r -- ${line#*<<M>>}
        fi
    done
    print -r -- "<<END>>"
done
zpty -d z
