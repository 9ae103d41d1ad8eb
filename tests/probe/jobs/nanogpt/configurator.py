"""A configurator in nanoGPT's style (its own file is not kept here), run as nanoGPT's train.py runs
its own: ``exec(open('configurator.py').read())`` over the script's globals. Each argument without
``=`` is a config file executed over those globals; each ``--key=value`` overrides a global that
exists, its value a Python literal of the global's type (else the text itself), said as nanoGPT's
says it ("Overriding: key = value"), the line gpudoc's nanoGPT adapter reads the arrival from."""
import sys
from ast import literal_eval

for _arg in sys.argv[1:]:
    if "=" not in _arg:  # a config file, executed over the script's globals
        with open(_arg) as _file:
            _text = _file.read()
        print(f"Overriding config with {_arg}:\n{_text}")
        exec(_text)
        continue
    _key, _, _raw = _arg.removeprefix("--").partition("=")
    if _key not in globals():
        raise ValueError(f"Unknown config key: {_key}")
    try:
        _value = literal_eval(_raw)
    except (SyntaxError, ValueError):
        _value = _raw
    if type(_value) is not type(globals()[_key]):
        raise TypeError(f"--{_key}={_raw}: expected a {type(globals()[_key]).__name__}")
    print(f"Overriding: {_key} = {_value}")
    globals()[_key] = _value
