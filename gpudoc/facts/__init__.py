"""Facts: everything gpudoc knows about the machine, gathered once into an immutable snapshot.

``model`` defines the snapshot; ``nvml`` (the only module that imports pynvml), ``smi_files``
(saved nvidia-smi output), ``procs``, ``host``, ``environment`` and ``torch_probe`` fill it;
``gather`` puts them together.
"""

from gpudoc.facts.model import (  # noqa: F401
    Facts,
    Gpu,
    GpuProcess,
    HostFacts,
    MigDevice,
    ProcessInfo,
    TorchFacts,
)
