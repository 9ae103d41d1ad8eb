# fish completion for gpudoc
# Generated from gpudoc's own command line by `python -m gpudoc.cli.completion --write`:
# change the CLI (or gpudoc/cli/completion/) and regenerate rather than editing this file.
# Print it with `gpudoc completions fish`.
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
        case ''
            echo ''
        case 'check'
            echo '-p --profile --only --skip --gpus --snapshot --python'
        case 'run'
            echo '-p --profile --retry-oom --tmux'
        case 'fix'
            echo '--log -p --profile'
        case 'estimate'
            echo '-p --profile --gpu-memory --micro-batch-size --python'
        case 'tune'
            echo '-p --profile --steps --min --max'
        case 'clean'
            echo '--gpus'
        case 'runs'
            echo '--last'
        case 'runs prune'
            echo '--keep --older-than'
        case 'runs diff'
            echo ''
        case 'runs show'
            echo '--plot'
        case 'logs'
            echo '--rank'
        case 'watch'
            echo '--interval'
        case 'profile'
            echo ''
        case 'profile list'
            echo ''
        case 'profile show'
            echo ''
        case 'profile new'
            echo '--snapshot'
        case 'profile schema'
            echo ''
        case 'restore'
            echo ''
        case 'completions'
            echo ''
    end
end

function __gpudoc_subs
    switch $argv[1]
        case ''
            echo 'check run fix estimate tune clean runs logs watch profile restore completions'
        case 'check'
            echo ''
        case 'run'
            echo ''
        case 'fix'
            echo ''
        case 'estimate'
            echo ''
        case 'tune'
            echo ''
        case 'clean'
            echo ''
        case 'runs'
            echo 'prune diff show'
        case 'runs prune'
            echo ''
        case 'runs diff'
            echo ''
        case 'runs show'
            echo ''
        case 'logs'
            echo ''
        case 'watch'
            echo ''
        case 'profile'
            echo 'list show new schema'
        case 'profile list'
            echo ''
        case 'profile show'
            echo ''
        case 'profile new'
            echo ''
        case 'profile schema'
            echo ''
        case 'restore'
            echo ''
        case 'completions'
            echo ''
    end
end

function __gpudoc_poskinds
    switch $argv[1]
        case ''
            echo ''
        case 'check'
            echo 'free*'
        case 'run'
            echo 'command*'
        case 'fix'
            echo 'runs*'
        case 'estimate'
            echo 'command*'
        case 'tune'
            echo 'command*'
        case 'clean'
            echo 'free*'
        case 'runs'
            echo ''
        case 'runs prune'
            echo ''
        case 'runs diff'
            echo 'free free'
        case 'runs show'
            echo 'runs'
        case 'logs'
            echo 'runs'
        case 'watch'
            echo 'runs'
        case 'profile'
            echo ''
        case 'profile list'
            echo ''
        case 'profile show'
            echo 'profiles'
        case 'profile new'
            echo 'free'
        case 'profile schema'
            echo ''
        case 'restore'
            echo 'runs'
        case 'completions'
            echo 'shells'
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
complete -c gpudoc -n '__gpudoc_at \'\'' -a check -d 'Pre-flight: is this machine ready for the training job, and if not, what exactly to do'
complete -c gpudoc -n '__gpudoc_at \'\'' -a run -d 'Launch a training job: checks first, the profile applied, a complete log, a run record'
complete -c gpudoc -n '__gpudoc_at \'\'' -a fix -d 'After a failure: say what happened and propose the next rungs of the tuning ladder'
complete -c gpudoc -n '__gpudoc_at \'\'' -a estimate -d 'Peak GPU memory per GPU for the profile\'s model and knobs, and the largest micro batch that fits'
complete -c gpudoc -n '__gpudoc_at \'\'' -a tune -d 'Find the largest micro batch that fits by short trials of the real command, the global batch exact'
complete -c gpudoc -n '__gpudoc_at \'\'' -a clean -d 'End your stray processes holding GPU memory (SIGTERM, then SIGKILL), then report what was freed'
complete -c gpudoc -n '__gpudoc_at \'\'' -a runs -d 'List the run records: id, start, duration, status, cause, peak memory, what changed and command'
complete -c gpudoc -n '__gpudoc_at \'\'' -a logs -d 'Print a run\'s output (the latest run by default); -f follows it until the run ends'
complete -c gpudoc -n '__gpudoc_at \'\'' -a watch -d 'Follow a running run (the latest by default): GPU memory with its history, processes, last line'
complete -c gpudoc -n '__gpudoc_at \'\'' -a profile -d 'List, show and create profiles (GPU needs, environment and training knobs)'
complete -c gpudoc -n '__gpudoc_at \'\'' -a restore -d 'Put the profile and every bound file back as they were before gpudoc\'s first edit of the run\'s chain'
complete -c gpudoc -n '__gpudoc_at \'\'' -a completions -d 'Print the completion script for bash, zsh or fish (subcommands, switches, profiles, runs)'
complete -c gpudoc -n '__gpudoc_at \'\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'check\'' -s p -l profile -x -a '(__gpudoc_profiles)' -d 'profile name or file (default: ./gpudoc.toml or $GPUDOC_PROFILE)'
complete -c gpudoc -n '__gpudoc_at \'check\'' -l json -d 'emit one JSON document (facts, findings, summary)'
complete -c gpudoc -n '__gpudoc_at \'check\'' -l strict -d 'exit 1 on warnings too'
complete -c gpudoc -n '__gpudoc_at \'check\'' -l only -x -a 'driver gpu proc env host driver.nvml driver.torch-cuda gpu.visible gpu.free-memory proc.stray env.alloc-conf env.tokenizers-parallelism env.omp-threads env.cuda-launch-blocking env.nccl-fail-fast host.shm host.ram-offload host.disk gpu.ecc gpu.throttle gpu.mig gpu.compute-mode gpu.persistence' -d 'run only these checks (comma-separated ids or groups: driver gpu proc env host)'
complete -c gpudoc -n '__gpudoc_at \'check\'' -l skip -x -a 'driver gpu proc env host driver.nvml driver.torch-cuda gpu.visible gpu.free-memory proc.stray env.alloc-conf env.tokenizers-parallelism env.omp-threads env.cuda-launch-blocking env.nccl-fail-fast host.shm host.ram-offload host.disk gpu.ecc gpu.throttle gpu.mig gpu.compute-mode gpu.persistence' -d 'skip these checks (ids or groups)'
complete -c gpudoc -n '__gpudoc_at \'check\'' -l gpus -x -d 'GPU indexes to check, e.g. 0,1 or 0-3 (default: the job\'s)'
complete -c gpudoc -n '__gpudoc_at \'check\'' -l snapshot -r -F -d 'read GPU facts from a saved nvidia-smi output or gpudoc --json'
complete -c gpudoc -n '__gpudoc_at \'check\'' -l deep -d 'also start the job\'s Python to probe torch (slow)'
complete -c gpudoc -n '__gpudoc_at \'check\'' -l list-checks -d 'list check ids and titles, then exit'
complete -c gpudoc -n '__gpudoc_at \'check\'' -l python -r -F -d 'the job\'s interpreter (default: the one the profile\'s latest run ran, else python3 on PATH)'
complete -c gpudoc -n '__gpudoc_at \'check\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'check\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'check\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'run\'' -s p -l profile -x -a '(__gpudoc_profiles)' -d 'Profile name or path (default: ./gpudoc.toml or $GPUDOC_PROFILE)'
complete -c gpudoc -n '__gpudoc_at \'run\'' -l no-check -d 'Skip the pre-flight checks'
complete -c gpudoc -n '__gpudoc_at \'run\'' -l force -d 'Launch even when a pre-flight check fails'
complete -c gpudoc -n '__gpudoc_at \'run\'' -l no-probe -d 'Do not observe the job from inside (the probe on its PYTHONPATH)'
complete -c gpudoc -n '__gpudoc_at \'run\'' -l clean -d 'First end this user\'s stray processes holding memory on the job\'s GPUs'
complete -c gpudoc -n '__gpudoc_at \'run\'' -s y -l yes -d 'Do not ask before ending processes (--clean)'
complete -c gpudoc -n '__gpudoc_at \'run\'' -l retry-oom -x -d 'After a GPU OOM, apply the next ladder rung and relaunch, up to N times'
complete -c gpudoc -n '__gpudoc_at \'run\'' -l allow-semantic -d 'Let --retry-oom use rungs that change the experiment (shorter sequences, ...)'
complete -c gpudoc -n '__gpudoc_at \'run\'' -l tmux -x -d 'Start this run in a new detached tmux session NAME and print how to attach'
complete -c gpudoc -n '__gpudoc_at \'run\'' -l watch -d 'Inside tmux: follow the run in a split pane below (gpudoc watch)'
complete -c gpudoc -n '__gpudoc_at \'run\'' -l wait -d 'When the job\'s GPUs lack only free memory, wait for it instead of refusing (--wait=SECONDS: give up after that long, exit 125)'
complete -c gpudoc -n '__gpudoc_at \'run\'' -l dry-run -d 'Show the command, environment and file edits; launch nothing'
complete -c gpudoc -n '__gpudoc_at \'run\'' -l json -d 'With --dry-run: one JSON object; otherwise the final record as JSON on stderr'
complete -c gpudoc -n '__gpudoc_at \'run\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'run\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'run\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'run\'' -a -- -d 'end of gpudoc switches: the command follows'
complete -c gpudoc -n '__gpudoc_at \'fix\'' -l log -r -F -d 'diagnose a log file (- for stdin)'
complete -c gpudoc -n '__gpudoc_at \'fix\'' -s p -l profile -x -a '(__gpudoc_profiles)' -d 'profile name or file (default: the run\'s profile, else ./gpudoc.toml)'
complete -c gpudoc -n '__gpudoc_at \'fix\'' -l apply -d 'write the next rung where the job reads it: the profile (comments kept), or a job without one its config files (each backed up) and the next command for its flags'
complete -c gpudoc -n '__gpudoc_at \'fix\'' -l rerun -d 'apply, then relaunch the recorded command with gpudoc run'
complete -c gpudoc -n '__gpudoc_at \'fix\'' -l allow-semantic -d 'also propose rungs that change the experiment (shorter sequences, smaller LoRA rank, user rungs)'
complete -c gpudoc -n '__gpudoc_at \'fix\'' -l json -d 'one JSON object: diagnosis and suggestions'
complete -c gpudoc -n '__gpudoc_at \'fix\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'fix\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'fix\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_pos \'fix\' 0+' -x -a '(__gpudoc_runs)'
complete -c gpudoc -n '__gpudoc_at \'estimate\'' -s p -l profile -x -a '(__gpudoc_profiles)' -d 'profile name or file (default: ./gpudoc.toml or $GPUDOC_PROFILE)'
complete -c gpudoc -n '__gpudoc_at \'estimate\'' -l json -d 'emit one JSON document (peak_bytes, breakdown, max_micro_batch_size, ...)'
complete -c gpudoc -n '__gpudoc_at \'estimate\'' -l gpu-memory -x -d 'GPU capacity in GiB (default: [gpu] memory_gib, else the visible GPU)'
complete -c gpudoc -n '__gpudoc_at \'estimate\'' -l micro-batch-size -x -d 'estimate for this micro batch instead of the profile\'s'
complete -c gpudoc -n '__gpudoc_at \'estimate\'' -l simulate -d 'simulate one training step of the real model code on meta tensors in the job\'s interpreter (needs torch there; the formula answers, saying why, when it cannot)'
complete -c gpudoc -n '__gpudoc_at \'estimate\'' -l python -r -F -d 'the job\'s interpreter for --simulate (default: the one the job\'s command runs, else python3 on PATH)'
complete -c gpudoc -n '__gpudoc_at \'estimate\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'estimate\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'estimate\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'estimate\'' -a -- -d 'end of gpudoc switches: the command follows'
complete -c gpudoc -n '__gpudoc_at \'tune\'' -s p -l profile -x -a '(__gpudoc_profiles)' -d 'profile name or file (default: ./gpudoc.toml or $GPUDOC_PROFILE)'
complete -c gpudoc -n '__gpudoc_at \'tune\'' -l steps -x -d 'optimizer steps per trial; the default is 3'
complete -c gpudoc -n '__gpudoc_at \'tune\'' -l min -x -d 'the smallest micro batch to try; the default is 1'
complete -c gpudoc -n '__gpudoc_at \'tune\'' -l max -x -d 'the largest micro batch to try (default: twice the estimate\'s, else the job\'s)'
complete -c gpudoc -n '__gpudoc_at \'tune\'' -l apply -d 'write the micro batch found where the job reads it, as fix --apply does'
complete -c gpudoc -n '__gpudoc_at \'tune\'' -l json -d 'one JSON object: best, trials'
complete -c gpudoc -n '__gpudoc_at \'tune\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'tune\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'tune\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'tune\'' -a -- -d 'end of gpudoc switches: the command follows'
complete -c gpudoc -n '__gpudoc_at \'clean\'' -l gpus -x -d 'GPU indexes to clear, e.g. 0,1 or 0-3 (default: all)'
complete -c gpudoc -n '__gpudoc_at \'clean\'' -s y -l yes -d 'do not ask for confirmation'
complete -c gpudoc -n '__gpudoc_at \'clean\'' -l dry-run -d 'show what would be ended; signal nothing'
complete -c gpudoc -n '__gpudoc_at \'clean\'' -l json -d 'emit one JSON document'
complete -c gpudoc -n '__gpudoc_at \'clean\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'clean\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'clean\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'runs\'' -a prune -d 'Remove the oldest run records, beyond the newest N or older than DAYS'
complete -c gpudoc -n '__gpudoc_at \'runs\'' -a diff -d 'Show what changed between two runs: knobs, environment, file edits, outcome'
complete -c gpudoc -n '__gpudoc_at \'runs\'' -a show -d 'Show one run: command, knobs, environment, edits, diagnosis, and memory over time per GPU'
complete -c gpudoc -n '__gpudoc_at \'runs\'' -l json -d 'emit one JSON document with every record'
complete -c gpudoc -n '__gpudoc_at \'runs\'' -l last -x -d 'only the N most recent runs'
complete -c gpudoc -n '__gpudoc_at \'runs\'' -l all -d 'every project\'s runs (those gpudoc has run in), one table each'
complete -c gpudoc -n '__gpudoc_at \'runs\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'runs\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'runs\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'runs prune\'' -l keep -x -d 'keep the newest N runs'
complete -c gpudoc -n '__gpudoc_at \'runs prune\'' -l older-than -x -d 'remove runs started more than DAYS ago'
complete -c gpudoc -n '__gpudoc_at \'runs prune\'' -l dry-run -d 'say what would be removed, remove nothing'
complete -c gpudoc -n '__gpudoc_at \'runs prune\'' -l json -d 'emit one JSON document'
complete -c gpudoc -n '__gpudoc_at \'runs prune\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'runs prune\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'runs prune\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'runs diff\'' -l json -d 'emit one JSON document'
complete -c gpudoc -n '__gpudoc_at \'runs diff\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'runs diff\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'runs diff\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'runs show\'' -l json -d 'emit one JSON document (the record and the timeline)'
complete -c gpudoc -n '__gpudoc_at \'runs show\'' -l plot -x -d 'also draw the chart into FILE (.png or .svg; needs gpudoc[plot])'
complete -c gpudoc -n '__gpudoc_at \'runs show\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'runs show\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'runs show\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_pos \'runs show\' 0' -x -a '(__gpudoc_runs)'
complete -c gpudoc -n '__gpudoc_at \'logs\'' -s f -l follow -d 'keep printing new output until the run ends'
complete -c gpudoc -n '__gpudoc_at \'logs\'' -l rank -x -d 'one local rank\'s own output, from torchrun\'s --log-dir files'
complete -c gpudoc -n '__gpudoc_at \'logs\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'logs\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'logs\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_pos \'logs\' 0' -x -a '(__gpudoc_runs)'
complete -c gpudoc -n '__gpudoc_at \'watch\'' -l interval -x -d 'seconds between frames; the default is 1'
complete -c gpudoc -n '__gpudoc_at \'watch\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'watch\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'watch\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_pos \'watch\' 0' -x -a '(__gpudoc_runs)'
complete -c gpudoc -n '__gpudoc_at \'profile\'' -a list -d 'List the profiles visible from here (project, user, shipped)'
complete -c gpudoc -n '__gpudoc_at \'profile\'' -a show -d 'Show a profile after `extends`: every table, the knobs and the global batch'
complete -c gpudoc -n '__gpudoc_at \'profile\'' -a new -d 'Start a profile in ./.gpudoc/profiles/NAME.toml, optionally from the GPUs of this machine'
complete -c gpudoc -n '__gpudoc_at \'profile\'' -a schema -d 'Print the JSON Schema of a profile, for editors that check TOML with one (taplo, Even Better TOML)'
complete -c gpudoc -n '__gpudoc_at \'profile\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'profile\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'profile\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'profile list\'' -l json -d 'the JSON envelope, its profiles under "profiles"'
complete -c gpudoc -n '__gpudoc_at \'profile list\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'profile list\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'profile list\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'profile show\'' -l json -d 'the resolved profile as JSON'
complete -c gpudoc -n '__gpudoc_at \'profile show\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'profile show\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'profile show\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_pos \'profile show\' 0' -x -a '(__gpudoc_profiles)'
complete -c gpudoc -n '__gpudoc_at \'profile new\'' -l from-gpu -d 'fill [gpu] from the driver (or --snapshot) and extend the nearest GPU tier'
complete -c gpudoc -n '__gpudoc_at \'profile new\'' -l from-run -d 'fill [train], [launch] and [bind] from what gpudoc read of a run\'s command (RUN_ID after NAME; default: the latest run)'
complete -c gpudoc -n '__gpudoc_at \'profile new\'' -l snapshot -r -F -d 'read GPUs from a saved nvidia-smi file instead of the driver'
complete -c gpudoc -n '__gpudoc_at \'profile new\'' -l force -d 'replace an existing profile (a backup is kept)'
complete -c gpudoc -n '__gpudoc_at \'profile new\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'profile new\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'profile new\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'profile schema\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'profile schema\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'profile schema\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_at \'restore\'' -l dry-run -d 'show what would be put back; write nothing'
complete -c gpudoc -n '__gpudoc_at \'restore\'' -l force -d 'restore a file even when it was changed by hand since gpudoc\'s last edit'
complete -c gpudoc -n '__gpudoc_at \'restore\'' -l json -d 'emit one JSON document'
complete -c gpudoc -n '__gpudoc_at \'restore\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'restore\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'restore\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_pos \'restore\' 0' -x -a '(__gpudoc_runs)'
complete -c gpudoc -n '__gpudoc_at \'completions\'' -l help-all -d 'Prints help messages of all sub-commands and quits'
complete -c gpudoc -n '__gpudoc_at \'completions\'' -s h -l help -d 'Prints this help message and quits'
complete -c gpudoc -n '__gpudoc_at \'completions\'' -s v -l version -d 'Prints the program\'s version and quits'
complete -c gpudoc -n '__gpudoc_pos \'completions\' 0' -x -a 'bash zsh fish'
