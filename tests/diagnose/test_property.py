"""Arbitrary input never crashes the parser, and an OOM survives any noise and prefix around it."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoc.diagnose.diagnosis import BACKENDS, CAUSES
from gpudoc.diagnose.stream import SignatureScanner
from gpudoc.diagnose.text import diagnose_many, diagnose_text

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Words that make a line a failure (a signature's or a marker's): noise never holds them.
_FAILURE_WORDS = ("rror", "xception", "ill", "sig", "fatal", "fail", "critical", "panic", "exit", "assert",
                  "traceback")

# Noise that looks like training output but carries no failure.
NOISE_LINE = st.one_of(
    st.from_regex(r"\Astep [0-9]{1,6} loss [0-9]\.[0-9]{3} lr [0-9]e-0[0-9]\Z", fullmatch=True),
    st.from_regex(r"\A  ?[0-9]{1,2}%\|#+ *\| [0-9]+/[0-9]+ \[[0-9:]+<[0-9:]+\]\Z", fullmatch=True),
    st.text(alphabet=st.characters(whitelist_categories=("Ll", "Lu", "Nd", "Zs")), max_size=60)
    .filter(lambda t: not any(word in t.lower() for word in _FAILURE_WORDS)),
)
PREFIX = st.sampled_from(["[rank{r}]: ", "[default{r}]:", "{r}: ", "[1,{r}]<stderr>:", "",
                          "2024-05-01 10:00:00,123 [rank{r}]: ", "\x1b[31m[rank{r}]: "])
OOM_SHAPES = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req:.2f} MiB. GPU {g} has a total capacity of "
    "79.15 GiB of which 12.00 MiB is free. Including non-PyTorch memory, this process has 79.00 GiB memory in use. "
    "Of the allocated memory 70.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.",
    "RuntimeError: CUDA out of memory. Tried to allocate {req:.2f} MiB (GPU {g}; 10.76 GiB total capacity; "
    "9.10 GiB already allocated; 3.56 MiB free; 9.45 GiB reserved in total by PyTorch)",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate {req:.2f} MiB. GPU {g} has a total capacty "
    "of 23.65 GiB of which 1.66 MiB is free. Of the allocated memory 12.09 GiB is allocated by PyTorch, and "
    "4.84 GiB is reserved by PyTorch but unallocated.",
]


@SETTINGS
@given(st.text(max_size=3000), st.one_of(st.none(), st.integers(-64, 300)))
def test_any_text_gives_a_valid_diagnosis(text, exit_code):
    d = diagnose_text(text, exit_code=exit_code)
    assert d.cause in CAUSES
    assert d.backend in BACKENDS
    assert isinstance(d.summary, str) and d.summary
    assert d.to_dict()["exit_code"] == exit_code


@SETTINGS
@given(st.binary(max_size=3000))
def test_any_bytes(blob):
    assert diagnose_text(blob).cause in CAUSES
    scanner = SignatureScanner(max_line=256)
    for i in range(0, len(blob), 97):
        for event in scanner.feed(blob[i:i + 97]):
            assert event.cause in CAUSES
    scanner.flush()


@SETTINGS
@given(st.lists(st.tuples(st.text(max_size=10), st.text(max_size=300), st.one_of(st.none(), st.integers(-20, 255))),
                max_size=4))
def test_any_set_of_logs(items):
    assert diagnose_many(items).cause in CAUSES


@SETTINGS
@given(
    before=st.lists(NOISE_LINE, max_size=30),
    after=st.lists(NOISE_LINE, max_size=30),
    prefix=PREFIX,
    rank=st.integers(0, 63),
    gpu=st.integers(0, 7),
    req=st.floats(1, 9000, allow_nan=False),
    shape=st.sampled_from(OOM_SHAPES),
    crlf=st.booleans(),
)
def test_oom_found_in_noise(before, after, prefix, rank, gpu, req, shape, crlf):
    message = shape.format(req=req, g=gpu)
    lines = [*before, prefix.format(r=rank) + message, *after]
    text = ("\r\n" if crlf else "\n").join(lines)
    d = diagnose_text(text)
    assert d.cause == "gpu_oom"
    assert d.gpu_index == gpu
    assert abs(d.requested_bytes - int(float(f"{req:.2f}") * 1024**2)) <= 1
    if "{r}" in prefix:
        assert d.rank == rank
    events = []
    scanner = SignatureScanner()
    data = text.encode()
    for i in range(0, len(data), 113):
        events += scanner.feed(data[i:i + 113])
    events += scanner.flush()
    assert [e.cause for e in events] == ["gpu_oom"]


def test_a_dataloader_death_without_its_pid_is_still_read():
    # Found by the CLI fuzz: the pid group can match with no digit in it.
    d = diagnose_text("RuntimeError: DataLoader worker (pid(s) , ) is killed by signal: Bus error.")
    assert d.cause == "shm" and d.pid is None
