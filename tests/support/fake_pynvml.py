"""A stand-in for ``pynvml`` (nvidia-ml-py) on a machine with one GPU of unified memory, as a GB10 answers:
NVML has no memory info for it (``nvmlDeviceGetMemoryInfo`` fails with NVML_ERROR_NOT_SUPPORTED), while
its name, utilisation and power read. The names, the error code and the error classes are pynvml's
(``NVMLError(value)`` becomes the code's subclass, ``NVMLError_NotSupported`` for 3, its text "Not
Supported"), so the sampler meets what it would meet there.

Imported by tests as ``support.fake_pynvml``, and copied as ``pynvml.py`` into a venv's site-packages
where a whole run must find it (the sampler's co-process runs ``python -I``: no PYTHONPATH).
"""

from __future__ import annotations

import types

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3

GPU_NAME = "NVIDIA GB10"
UTILISATION_PCT = 37
POWER_MW = 41_250

_TEXT = {NVML_ERROR_UNINITIALIZED: "Uninitialized", NVML_ERROR_NOT_SUPPORTED: "Not Supported"}
_initialised = False


class NVMLError(Exception):
    _subclasses: dict[int, type[NVMLError]] = {}

    def __new__(cls, value: int) -> NVMLError:
        chosen = NVMLError._subclasses.get(value, cls) if cls is NVMLError else cls
        err = Exception.__new__(chosen)
        err.value = value
        return err

    def __init__(self, value: int) -> None:
        self.value = value

    def __str__(self) -> str:
        return _TEXT.get(self.value, f"Unknown Error {self.value}")


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_Uninitialized(NVMLError):
    pass


NVMLError._subclasses.update({NVML_ERROR_NOT_SUPPORTED: NVMLError_NotSupported,
                              NVML_ERROR_UNINITIALIZED: NVMLError_Uninitialized})


def _check() -> None:
    if not _initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def nvmlInit() -> None:
    global _initialised
    _initialised = True


def nvmlShutdown() -> None:
    global _initialised
    _check()
    _initialised = False


def nvmlDeviceGetCount() -> int:
    _check()
    return 1


def nvmlDeviceGetHandleByIndex(index: int) -> object:
    _check()
    if index != 0:
        raise NVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT
    return types.SimpleNamespace(index=0)


def nvmlDeviceGetName(handle: object) -> str:
    _check()
    return GPU_NAME


def nvmlDeviceGetMemoryInfo(handle: object) -> object:
    _check()
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # unified memory: NVML has no figure of its own


def nvmlDeviceGetUtilizationRates(handle: object) -> object:
    _check()
    return types.SimpleNamespace(gpu=UTILISATION_PCT, memory=0)


def nvmlDeviceGetPowerUsage(handle: object) -> int:
    _check()
    return POWER_MW
